"""An OpenAI-compatible upstream that behaves like a hosted API without grammar support, for tests of what
tiankong sends to such backends: it refuses requests without ``model``, ignores ``response_format`` and
grammars, answers chat requests with queued contents (then the last one again) and records every body."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CloudLike(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []
    answers: list[str] = ['{"city":"Paris"}']

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        CloudLike.seen.append(body)
        content = CloudLike.answers.pop(0) if len(CloudLike.answers) > 1 else CloudLike.answers[0]
        if not body.get("model"):
            code, payload = 400, {"error": {"message": "you must provide a model parameter",
                                            "type": "invalid_request_error"}}
        else:
            code, payload = 200, {"id": "c1", "object": "chat.completion", "model": body["model"], "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve_handler(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A stand-in HTTP server in a thread on a free loopback port; its base URL, stopped on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def cloud_like(*answers: str) -> Iterator[str]:
    """Serve ``CloudLike``; ``answers``: the chat contents to give, in order (default: one city)."""
    CloudLike.seen.clear()
    CloudLike.answers = list(answers) or ['{"city":"Paris"}']
    with serve_handler(CloudLike) as url:
        yield url
