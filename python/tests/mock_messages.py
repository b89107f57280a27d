"""A mock Anthropic Messages API (``POST /v1/messages``) for the SDK's own
``tool_runner``: every request body is validated with the SDK's own request
type (pydantic over ``anthropic.types.beta.message_create_params``'
``MessageCreateParamsNonStreaming``, unknown top-level fields refused) and
every response is built and validated with the SDK's response model
(``BetaMessage``). A scripted model decides each reply from the request it
answers (``script(body) -> list of content blocks``, or a string to end
the turn)."""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional, Union

import pydantic
from anthropic.types.beta import BetaMessage
from anthropic.types.beta.message_create_params import MessageCreateParamsNonStreaming

Script = Callable[[dict[str, Any]], Union[str, list[dict[str, Any]]]]

_PARAMS = pydantic.TypeAdapter(MessageCreateParamsNonStreaming)
_FIELDS = set(MessageCreateParamsNonStreaming.__annotations__) | {
    k for base in MessageCreateParamsNonStreaming.__mro__ for k in getattr(base, "__annotations__", {})
}
_ids = itertools.count(1)


def tool_use(name: str, input: dict[str, Any], toolset: str) -> dict[str, Any]:
    """One toolset member call, as the API sends it."""
    return {"type": "tool_use", "id": f"toolu_{next(_ids):024d}", "name": name, "input": input, "toolset_name": toolset}


def validate_request(body: Any) -> list[str]:
    """What is wrong with a request body, by the SDK's own types."""
    problems: list[str] = []
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        problems.append(f"unknown top-level fields {unknown}")
    try:
        _PARAMS.validate_python(body, strict=False)
    except pydantic.ValidationError as e:
        problems.extend(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()[:10])
    return problems


class MockMessages:
    def __init__(self, key: str, script: Script) -> None:
        self.key = key
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.error: Optional[str] = None
        mock = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                record: dict[str, Any] = {
                    "path": self.path,
                    # anthropic 2.x sends the key as a bearer token (_client.py `_api_key_auth`)
                    "authorized": self.headers.get("Authorization") == "Bearer " + mock.key
                    or self.headers.get("x-api-key") == mock.key,
                    "beta": self.headers.get("anthropic-beta"),
                    "helper": self.headers.get("x-stainless-helper"),
                }
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                record["body"] = body
                record["problems"] = validate_request(body)
                mock.requests.append(record)
                if not self.path.startswith("/v1/messages"):
                    return self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})
                if not record["authorized"]:
                    return self._send(401, {"type": "error", "error": {"type": "authentication_error", "message": "key"}})
                try:
                    reply = mock.script(body)
                    message = mock.message(body, reply)
                except Exception as e:  # the script's own failure, told to the test
                    mock.error = mock.error or f"{type(e).__name__}: {e}"
                    return self._send(400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(e)[:200]}})
                self._send(200, message)

            def _send(self, status: int, value: Any) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def message(self, body: dict[str, Any], reply: Union[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """The response, built and validated with the SDK's ``BetaMessage``."""
        if isinstance(reply, str):
            content, stop = [{"type": "text", "text": reply}], "end_turn"
        else:
            content, stop = reply, "tool_use"
        value = {
            "id": f"msg_{next(_ids):024d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-mock"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        return BetaMessage.model_validate(value).model_dump(mode="json", exclude_unset=True)

    def close(self) -> list[dict[str, Any]]:
        self.server.shutdown()
        self.server.server_close()
        return self.requests


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of the request's last user message."""
    last = body["messages"][-1]
    if last["role"] != "user" or not isinstance(last["content"], list):
        return []
    return [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(c.get("text", "") for c in content or [] if isinstance(c, dict) and c.get("type") == "text")


def result_image(block: dict[str, Any]) -> Optional[str]:
    for c in block.get("content") or []:
        if isinstance(c, dict) and c.get("type") == "image":
            return str(c["source"]["data"])
    return None
