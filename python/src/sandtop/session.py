"""Sessions: a guest started and stopped by ``host-cli guest start|stop``,
and the channel to its daemon.

``host-cli`` is run with an argv list (never a shell); the session's
record, token and socket are then read from its folder under the state
directory, exactly where host-cli keeps them (``$SANDTOP_STATE_DIR``, else
``$XDG_STATE_HOME/sandtop``, else ``~/.local/state/sandtop``;
``sessions/<name>/``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ._channel import DaemonClient, SandtopError

__all__ = ["Session", "state_dir"]

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")


def state_dir() -> str:
    """host-cli's state directory."""
    d = os.environ.get("SANDTOP_STATE_DIR")
    if d:
        return d
    d = os.environ.get("XDG_STATE_HOME")
    if d:
        return os.path.join(d, "sandtop")
    home = os.environ.get("HOME")
    if not home:
        raise SandtopError("no state directory: set SANDTOP_STATE_DIR or HOME")
    return os.path.join(home, ".local", "state", "sandtop")


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        shown = repr(name)[:40]
        raise ValueError(f"invalid session name {shown}: use 1-32 characters a-z, 0-9 and '-', not starting with '-'")
    return name


@dataclass
class Session:
    """One guest session. ``screen`` is its display size (width, height)."""

    name: str
    backend: str
    screen: tuple[int, int]
    folder: str
    record: dict[str, Any] = field(repr=False)
    host_cli: str = "host-cli"
    timeout: float = 60.0
    _client: Optional[DaemonClient] = field(default=None, repr=False)
    _owned: bool = field(default=False, repr=False)

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def start(
        cls,
        name: Optional[str] = None,
        *,
        screen: Optional[tuple[int, int]] = None,
        display: Optional[tuple[int, int]] = None,
        backend: str = "docker",
        image: Optional[str] = None,
        network: Optional[str] = None,
        extra_args: Sequence[str] = (),
        host_cli: str = "host-cli",
        timeout: float = 60.0,
        start_timeout: float = 180.0,
    ) -> "Session":
        """``host-cli guest start`` (argv only, no shell), then attach.

        The session is owned: ``stop()`` (or leaving a ``with`` block)
        stops it. ``screen`` is the display's size, ``(width, height)``
        (``display`` is its older name, kept for one release).
        ``extra_args`` are more ``guest start`` options, passed as
        separate arguments.
        """
        if display is not None:
            if screen is not None:
                raise ValueError("give screen or display (its older name), not both")
            screen = display
        argv = [host_cli, "guest", "start", "--backend", _choice(backend, ("docker", "local"), "backend")]
        if name is not None:
            argv += ["--name", _check_name(name)]
        if screen is not None:
            w, h = screen
            if not all(type(v) is int and 1 <= v <= 8192 for v in (w, h)):
                raise ValueError("screen must be two integers within 1..8192")
            argv += ["--screen", f"{w}x{h}"]
        if image is not None:
            argv += ["--image", image]
        if network is not None:
            argv += ["--network", network]
        for a in extra_args:
            if not isinstance(a, str):
                raise TypeError("extra_args must be strings")
            argv.append(a)
        out = _run(argv, start_timeout)
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        started = lines[-1] if lines else ""
        session = cls.attach(_check_name(started), host_cli=host_cli, timeout=timeout)
        session._owned = True
        return session

    @classmethod
    def attach(cls, name: str, *, host_cli: str = "host-cli", timeout: float = 60.0) -> "Session":
        """An existing session (``host-cli guest ls`` lists them). Not owned:
        ``stop()`` still stops it when called, leaving a ``with`` block does not."""
        folder = os.path.join(state_dir(), "sessions", _check_name(name))
        path = os.path.join(folder, "session.json")
        try:
            with open(path, encoding="utf-8") as f:
                record = json.loads(f.read(1 << 20))
        except FileNotFoundError:
            raise SandtopError(f"no session named {name!r} (host-cli guest ls lists them)") from None
        except (OSError, ValueError) as e:
            raise SandtopError(f"cannot read the record of session {name!r}: {type(e).__name__}") from None
        if not isinstance(record, dict):
            raise SandtopError(f"the record of session {name!r} is invalid")
        backend = record.get("backend")
        screen = record.get("screen")
        if backend not in ("docker", "local") or not isinstance(screen, dict):
            raise SandtopError(f"the record of session {name!r} is invalid")
        w, h = screen.get("width"), screen.get("height")
        if not (isinstance(w, int) and isinstance(h, int) and all(type(v) is int and 1 <= v <= 8192 for v in (w, h))):
            raise SandtopError(f"the record of session {name!r} is invalid")
        return cls(name=name, backend=backend, screen=(w, h), folder=folder, record=record, host_cli=host_cli, timeout=timeout)

    def stop(self, *, force: bool = False, timeout: float = 60.0) -> None:
        """``host-cli guest stop NAME`` (the guest and its folder are removed)."""
        argv = [self.host_cli, "guest", "stop", _check_name(self.name)]
        if force:
            argv.append("--force")
        self._client = None
        _run(argv, timeout)
        self._owned = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owned:
            self.stop()

    # -- the daemon ----------------------------------------------------------

    @property
    def socket_dir(self) -> str:
        """Where the daemon's socket is: ``guest/`` for Docker sessions."""
        return os.path.join(self.folder, "guest") if self.backend == "docker" else self.folder

    @property
    def client(self) -> DaemonClient:
        """The authenticated channel (opened once, version checked)."""
        if self._client is None:
            self._client = DaemonClient.from_folder(
                self.socket_dir, os.path.join(self.folder, "token"), timeout=self.timeout
            )
        return self._client

    @property
    def container_name(self) -> Optional[str]:
        docker = self.record.get("docker")
        name = docker.get("container_name") if isinstance(docker, dict) else None
        return name if isinstance(name, str) else None


def _choice(value: str, allowed: Sequence[str], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}")
    return value


def _run(argv: list[str], timeout: float) -> str:
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, shell=False)
    except FileNotFoundError:
        raise SandtopError(f"{argv[0]!r} is not found (build host-cli, or pass host_cli=PATH)") from None
    except subprocess.TimeoutExpired:
        raise SandtopError(f"host-cli {' '.join(argv[1:3])} did not finish within {timeout:.0f} s") from None
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-5:])
        raise SandtopError(f"host-cli {' '.join(argv[1:3])} failed (exit {p.returncode}): {tail}")
    return p.stdout
