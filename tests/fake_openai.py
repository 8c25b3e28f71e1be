"""A real HTTP server on localhost that speaks the chat-completions protocol, with fault injection.

Each request is identified by a key (sha256 of its `messages`). `faults` is a list applied to the
first attempts of every key, in order: "429" (with Retry-After), "500", "timeout" (sleeps past the
client's timeout), "garbage" (200 with a body that is not JSON), "empty" (an empty completion).
The server records, per key, every attempt's arrival time and outcome, the largest number of requests
in flight, and the Authorization headers it saw.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: 32 clients connecting at once would see refused
    # connections (and retries) that a real endpoint would not cause
    request_queue_size = 256


class FakeOpenAI:
    """Start with `with FakeOpenAI(...) as server:`; `server.base_url` ends in /v1."""

    def __init__(self, latency: float = 0.0, faults: list[str] | None = None, retry_after: float = 0.0,
                 hang: float = 2.0, reply: str | None = None) -> None:
        self.latency, self.faults, self.retry_after, self.hang = latency, list(faults or []), retry_after, hang
        self.reply = reply
        self.attempts: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.auth_headers: set[str] = set()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def successes(self, key: str) -> int:
        return sum(outcome == "ok" for _, outcome in self.attempts[key])

    @property
    def total_requests(self) -> int:
        return sum(len(v) for v in self.attempts.values())

    def answer(self, messages: Any) -> str:
        """The completion text for a request (deterministic; a valid three-step trace by default)."""
        if self.reply is not None:
            return self.reply
        return ("Step 1: The objects move across the frames.\nStep 2: The keyframe is chosen because the target "
                "is clearest there.\nStep 3: The target is in the frame.")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints: no new connection per request

            def log_message(self, *args: object) -> None:  # keep test output clean
                return

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                key = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()
                with server._lock:
                    server.auth_headers.add(self.headers.get("Authorization", ""))
                    attempt = len(server.attempts[key])
                    fault = server.faults[attempt] if attempt < len(server.faults) else "ok"
                    server.attempts[key].append((time.monotonic(), fault))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    time.sleep(server.latency)
                    self._respond(fault, body)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _respond(self, fault: str, body: dict) -> None:
                if fault == "429":
                    self._send(429, {"error": {"message": "slow down", "type": "rate_limit"}},
                               {"Retry-After": str(server.retry_after)})
                elif fault == "500":
                    self._send(500, {"error": {"message": "boom", "type": "server_error"}})
                elif fault == "timeout":
                    time.sleep(server.hang)
                    self._send(200, _completion(server.answer(body["messages"])))
                elif fault == "garbage":
                    self._raw(200, b"<html>this is not json")
                elif fault == "empty":
                    self._send(200, _completion(""))
                else:
                    self._send(200, _completion(server.answer(body["messages"])))

            def _send(self, code: int, payload: dict, headers: dict | None = None) -> None:
                self._raw(code, json.dumps(payload).encode(), headers)

            def _raw(self, code: int, data: bytes, headers: dict | None = None) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        return Handler


def _completion(text: str) -> dict:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "fake-vlm",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": max(1, len(text.split())), "total_tokens": 100},
    }


def main() -> None:
    """Serve until killed: `python -m tests.fake_openai --latency 0.25` prints the base URL first."""
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    server = FakeOpenAI(latency=args.latency)
    with server:
        sys.stdout.write(server.base_url + "\n")
        sys.stdout.flush()
        threading.Event().wait()


if __name__ == "__main__":
    main()
