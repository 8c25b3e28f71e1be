"""A real HTTP server on localhost that speaks the chat-completions protocol, with fault injection.

Each request is identified by a key (sha256 of its `messages`). `faults` is a list applied to the
first attempts of every key, in order: "429" (with Retry-After), "500", "timeout" (sleeps past the
client's timeout), "garbage" (200 with a body that is not JSON), "empty" (an empty completion),
"truncated" (finish_reason "length"). The server records, per key, every attempt's arrival time and
outcome, the largest number of requests in flight, the Authorization headers it saw and every request body.

A teacher that cannot answer: `models` makes it list those names at GET /v1/models and answer 404 (as vLLM) to a
request for any other model (without it, every name is served and there is no model list: 404, as at some
providers); `api_key` makes it answer 401 to any other key; `fail_after` makes every request after that many
answered get `down` ("500", or "drop": the connection closed without a reply, as a server that died).

With `reasoning` set it answers like a thinking model: it "writes" that reasoning first (one token per word),
returns it in `reasoning_field` (`reasoning_content` as Ark and vLLM's reasoning parsers; `reasoning` as newer
vLLM) beside the content, and reports `usage.completion_tokens_details.reasoning_tokens` (unless
`report_reasoning_tokens` is off). The request's `max_tokens` is spent as the provider spends it: `budget="total"`
(vLLM, OpenAI: reasoning and answer share it, so a long reasoning leaves the content empty or cut, with
`finish_reason` "length") or `budget="answer"` (Volcengine Ark: max_tokens bounds the answer only). The thinking
switches turn the reasoning off: Ark's `{"thinking": {"type": "disabled"}}` and the chat-template
`{"chat_template_kwargs": {"enable_thinking": false}}`.

It is an asyncio server (HTTP/1.1 with keep-alive, as real endpoints) on its own event loop in a
background thread: waiting requests cost no thread each, so at 32+ requests in flight the injected
latency is what the client sees (a thread-per-connection server adds GIL convoys of tens of ms).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections import defaultdict
from typing import Any

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
           500: "Internal Server Error"}


class FakeOpenAI:
    """Start with `with FakeOpenAI(...) as server:`; `server.base_url` ends in /v1."""

    def __init__(self, latency: float = 0.0, faults: list[str] | None = None, retry_after: float = 0.0,
                 hang: float = 2.0, reply: str | None = None, reasoning: str | None = None,
                 reasoning_field: str = "reasoning_content", budget: str = "total",
                 report_reasoning_tokens: bool = True, models: tuple[str, ...] | None = None,
                 api_key: str | None = None, fail_after: int | None = None, down: str = "500") -> None:
        self.latency, self.faults, self.retry_after, self.hang = latency, list(faults or []), retry_after, hang
        self.models, self.api_key, self.fail_after, self.down = models, api_key, fail_after, down
        self.answered = 0  # chat requests answered "ok" so far (fail_after counts these)
        self.model_lists = 0  # GET /v1/models requests
        self.reply = reply
        self.reasoning, self.reasoning_field, self.budget = reasoning, reasoning_field, budget
        self.report_reasoning_tokens = report_reasoning_tokens
        self.bodies: list[dict] = []
        self.attempts: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.auth_headers: set[str] = set()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._port = 0
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=512), self._loop).result()
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

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

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
                    self._write(writer, 401, {"error": {"message": "Incorrect API key provided",
                                                       "code": "invalid_api_key"}})
                elif lines[0].startswith("GET ") and lines[0].split()[1].endswith("/models") and self.models:
                    self.model_lists += 1
                    self._write(writer, 200, {"object": "list", "data": [
                        {"id": name, "object": "model", "created": 0, "owned_by": "fake"} for name in self.models]})
                elif not lines[0].startswith("POST ") or "/chat/completions" not in lines[0]:
                    self._write(writer, 404, {"error": {"message": "not found"}})
                elif self.models and json.loads(body).get("model") not in self.models:
                    self._write(writer, 404, {"error": {"message": f"The model `{json.loads(body).get('model')}` "
                                                                   "does not exist.", "code": 404}})
                elif not await self._request(json.loads(body), headers, writer):
                    break  # "drop": closed without a reply
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client closed the connection (or gave up: the timeout fault)
        finally:
            writer.close()

    async def _request(self, body: dict, headers: dict[str, str], writer: asyncio.StreamWriter) -> bool:
        """Answer one chat request; False when the connection is to be dropped without a reply."""
        key = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()
        with self._lock:
            self.bodies.append(body)
            self.auth_headers.add(headers.get("authorization", ""))
            attempt = len(self.attempts[key])
            fault = self.faults[attempt] if attempt < len(self.faults) else "ok"
            if fault == "ok" and self.fail_after is not None:
                fault = "ok" if self.answered < self.fail_after else self.down
            self.answered += fault == "ok"
            self.attempts[key].append((time.monotonic(), fault))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
            if fault == "429":
                self._write(writer, 429, {"error": {"message": "slow down", "type": "rate_limit"}},
                            {"Retry-After": str(self.retry_after)})
            elif fault == "500":
                self._write(writer, 500, {"error": {"message": "boom", "type": "server_error"}})
            elif fault == "timeout":
                await asyncio.sleep(self.hang)
                self._write(writer, 200, _completion(self.answer(body["messages"])))
            elif fault == "garbage":
                self._raw(writer, 200, b"<html>this is not json")
            elif fault == "empty":
                self._write(writer, 200, _completion(""))
            elif fault == "truncated":
                self._write(writer, 200, _completion("Step 1: The video shows", finish_reason="length"))
            elif fault == "drop":
                return False
            else:
                self._write(writer, 200, self.thinking_completion(body))
        finally:
            with self._lock:
                self.in_flight -= 1
        return True

    def _write(self, writer: asyncio.StreamWriter, code: int, payload: dict, headers: dict | None = None) -> None:
        self._raw(writer, code, json.dumps(payload).encode(), headers)

    @staticmethod
    def _raw(writer: asyncio.StreamWriter, code: int, data: bytes, headers: dict | None = None) -> None:
        head = [f"HTTP/1.1 {code} {REASONS.get(code, 'Status')}", "Content-Type: application/json",
                f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)


    def thinks(self, body: dict) -> bool:
        """Whether this request gets reasoning (a thinking model, no switch turned it off)."""
        if self.reasoning is None:
            return False
        if (body.get("thinking") or {}).get("type") == "disabled":
            return False
        return (body.get("chat_template_kwargs") or {}).get("enable_thinking", True) is not False

    def thinking_completion(self, body: dict) -> dict:
        """The reply to a request: reasoning first (when it thinks), then the answer, within `max_tokens`."""
        answer = self.answer(body["messages"]).split(" ")
        if not self.thinks(body):
            return _completion(" ".join(answer))
        thought = str(self.reasoning).split(" ")
        limit = int(body.get("max_tokens") or 1 << 30)
        thought = thought[:limit] if self.budget == "total" else thought
        room = limit - len(thought) if self.budget == "total" else limit
        said = answer[:max(room, 0)]
        finish = "length" if len(said) < len(answer) else "stop"
        payload = _completion(" ".join(said), finish_reason=finish)
        payload["choices"][0]["message"][self.reasoning_field] = " ".join(thought)
        if not said:
            payload["choices"][0]["message"]["content"] = None  # vLLM: nothing after the reasoning
        payload["usage"]["completion_tokens"] = len(thought) + len(said)
        payload["usage"]["total_tokens"] = 100 + len(thought) + len(said)
        if self.report_reasoning_tokens:
            payload["usage"]["completion_tokens_details"] = {"reasoning_tokens": len(thought)}
        return payload


def _completion(text: str, finish_reason: str = "stop") -> dict:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "fake-vlm",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
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
