"""A scripted, OpenAI-compatible model server on 127.0.0.1, for running real agents in tests.

A real coding agent needs a model; the tests cannot reach a real one, and a real one would not
answer the same way twice. This server answers `POST /v1/chat/completions` the way a model
that follows the prompt's instruction exactly would: the *script* (a function of the request's
messages) picks each reply, so the same conversation always gets the same answer and several
agents may talk to it at once. Every request is recorded (`requests`), so a test can check
that the agent really sent its prompt. (That the requests came through sealbench's egress
proxy is read from the attempts' egress log in the ledger: the proxy forwards plain HTTP in
origin form, so the server cannot tell.)

Only non-streaming completions are served (mini-swe-agent does not stream); a request asking
for a stream is answered 400, so an agent that streams fails loudly rather than oddly.
Standard library only: the tests import it, and it runs in a thread of the test process.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Message = dict[str, Any]
Reply = dict[str, Any]
"""An assistant message: {"content": str} and optionally {"tool_calls": [...]}."""
Script = Callable[[list[Message]], Reply]


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    target: str
    """The request line's target: `/v1/chat/completions` in origin form; the absolute URL
    when a client sends its request to this server as if it were an HTTP proxy."""
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[Message]:
        return list(self.body.get("messages", []))

    def text(self) -> str:
        """Every message's text content, joined: what a test searches for the prompt."""
        return "\n".join(_content_text(m.get("content")) for m in self.messages)


def _content_text(content: object) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def bash_call(command: str, *, content: str = "", call_id: str = "call_0") -> Reply:
    """An assistant reply that calls a `bash` tool with one command (the OpenAI tool-call
    shape agents such as mini-swe-agent ask for)."""
    return {"content": content, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


@dataclass
class ScriptedModelServer:
    """Serve `script` on 127.0.0.1 (port chosen by the OS) until the context exits."""

    script: Script
    model: str = "scripted"
    requests: list[Recorded] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        assert self._server is not None, "the server is not running"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedModelServer:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="scripted-model-server")
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat.completion object answering one request body."""
        reply = self.script(list(body.get("messages", [])))
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
        if reply.get("tool_calls"):
            message["tool_calls"] = reply["tool_calls"]
        prompt_chars = len(json.dumps(body.get("messages", [])))
        return {
            "id": f"chatcmpl-scripted-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": 10,
                      "total_tokens": prompt_chars // 4 + 10},
        }


def _handler_for(server: ScriptedModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads `requests`, not a log on stderr."""

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as exc:
                self._send_json(400, {"error": {"message": f"bad JSON: {exc}"}})
                return
            server.record(Recorded(self.path, dict(self.headers.items()), body))
            if not self.path.endswith("/chat/completions"):
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            if body.get("stream"):
                self._send_json(400, {"error": {"message": "this scripted server does not "
                                                           "stream; ask without stream"}})
                return
            self._send_json(200, server.completion(body))

        def _send_json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
