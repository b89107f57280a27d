"""Checks of images from the daemon before anyone uses them (as host-cli's
image_check): base64 of the standard alphabet, a PNG signature and an IHDR
that states the declared size, 8-bit RGB, not interlaced. Nothing is
decoded."""

from __future__ import annotations

import base64
import binascii
import struct
from typing import Any, Optional

from ._channel import ChannelError

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_SIDE = 8192


def bad(what: str) -> ChannelError:
    return ChannelError(f"the daemon's reply is invalid: {what}", outcome_unknown=True)


def png_size(data: bytes) -> tuple[int, int]:
    """The width and height an RGB 8-bit PNG's IHDR states."""
    if len(data) < 33 or not data.startswith(_SIGNATURE) or data[12:16] != b"IHDR" or data[8:12] != b"\x00\x00\x00\x0d":
        raise bad("the image is not a PNG")
    w, h, depth, colour, _comp, _filt, interlace = struct.unpack(">IIBBBBB", data[16:29])
    if depth != 8 or colour != 2 or interlace != 0:
        raise bad("the PNG is not 8-bit RGB, non-interlaced")
    if not (1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE):
        raise bad("the PNG's size is out of range")
    return w, h


def checked_png_b64(b64: object, width: object, height: object) -> str:
    """Checks base64 PNG data against its declared size; returns the base64 text."""
    if not isinstance(b64, str) or not b64:
        raise bad("the image data is missing")
    if type(width) is not int or type(height) is not int:
        raise bad("the image size is not two integers")
    if len(b64) > 4 * ((32 + 4 * width * height * 3 + 3) // 3) + 4096:
        raise bad("the image data is longer than its size allows")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise bad("the image data is not base64") from None
    if png_size(raw) != (width, height):
        raise bad(f"the PNG is {png_size(raw)[0]}x{png_size(raw)[1]}, the reply says {width}x{height}")
    return b64


def _size(v: object) -> Optional[tuple[int, int]]:
    if not isinstance(v, dict) or set(v) != {"width", "height"}:
        return None
    w, h = v["width"], v["height"]
    if type(w) is int and type(h) is int and 1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE:
        return (w, h)
    return None


def check_screenshot(shot: object, asked_size: Optional[tuple[int, int]]) -> tuple[str, dict[str, Any]]:
    """A daemon ``Screenshot`` against what was asked (PNG, whole screen,
    ``asked_size`` fitted with ``contain`` or screen pixels). Returns the
    base64 PNG and its ScaleMap."""
    if not isinstance(shot, dict) or set(shot) != {"format", "width", "height", "data", "scale_map"}:
        raise bad("the screenshot has the wrong shape")
    if shot["format"] != "png":
        raise bad("the screenshot is not the PNG asked for")
    m = shot["scale_map"]
    if not isinstance(m, dict) or set(m) != {"screen", "region", "image"}:
        raise bad("the ScaleMap has the wrong shape")
    screen, image = _size(m["screen"]), _size(m["image"])
    region = m["region"]
    if screen is None or image is None or not isinstance(region, dict):
        raise bad("the ScaleMap has the wrong shape")
    if region != {"x": 0, "y": 0, "width": screen[0], "height": screen[1]}:
        raise bad("the screenshot is not of the whole screen")
    if image != (shot["width"], shot["height"]):
        raise bad("the screenshot's size and its ScaleMap disagree")
    if asked_size is None:
        if image != screen:
            raise bad("the screenshot is not at screen size")
    elif not (
        image[0] <= asked_size[0]
        and image[1] <= asked_size[1]
        and (image[0] == asked_size[0] or image[1] == asked_size[1])
    ):
        raise bad("the screenshot is not the size asked for")
    return checked_png_b64(shot["data"], image[0], image[1]), m


def check_region_shot(shot: object, region: dict[str, int], within: tuple[int, int]) -> tuple[str, dict[str, Any]]:
    """A daemon ``Screenshot`` of a screen ``region`` fitted (``contain``)
    into ``within``: the ScaleMap must name that region and an image that
    fits ``within`` touching one side. Returns the base64 PNG and the map."""
    if not isinstance(shot, dict) or set(shot) != {"format", "width", "height", "data", "scale_map"}:
        raise bad("the screenshot has the wrong shape")
    if shot["format"] != "png":
        raise bad("the screenshot is not the PNG asked for")
    m = shot["scale_map"]
    if not isinstance(m, dict) or set(m) != {"screen", "region", "image"}:
        raise bad("the ScaleMap has the wrong shape")
    screen, image = _size(m["screen"]), _size(m["image"])
    if screen is None or image is None or m["region"] != region:
        raise bad("the zoom is not of the region asked for")
    if image != (shot["width"], shot["height"]):
        raise bad("the screenshot's size and its ScaleMap disagree")
    if not (image[0] <= within[0] and image[1] <= within[1] and (image[0] == within[0] or image[1] == within[1])):
        raise bad("the zoom is not the size asked for")
    return checked_png_b64(shot["data"], image[0], image[1]), m
