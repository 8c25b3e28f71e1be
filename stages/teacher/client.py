"""One client for every teacher / rater: OpenAI-compatible chat completions, or the offline template backend.

- `openai` backend: any chat-completions endpoint through the `openai` package (Seed1.5-VL on
  Volcengine Ark, OpenAI, a local vLLM or SGLang server). The API key is read from the environment
  variable *named* in params and never logged or stored.
- `template` backend: writes the answer from the annotations carried by the request (offline default);
  it goes through the same cache and records, and is labelled as such.

Thinking models (Seed1.5-VL on Ark, vLLM with a reasoning parser): provider fields (`teacher.extra_body`, the
named `teacher.thinking` switch) go into every request body; the reply's hidden reasoning (`reasoning_content`,
or `reasoning` in newer vLLM) and its token count (`usage.completion_tokens_details.reasoning_tokens`) are kept
beside the content in the cache and the result, never in `text`. A reply cut at `finish_reason` length with empty
content after reasoning is its own outcome (`REASONING_BUDGET_EXHAUSTED`), recorded and cached (it was paid
for), not retried: the same request would spend the same budget. docs/teachers.md has the provider details.

Engineering: bounded concurrency (asyncio semaphore), a requests-per-minute limit, a per-request
timeout, retries with exponential backoff and full jitter on 429, 5xx, timeouts, connection errors and
malformed bodies (honouring Retry-After), and the persistent response cache. A request that still
fails is returned as a record with its error; it never raises.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from stages.core.params import THINKING_SWITCH_KEYS, TeacherParams
from stages.teacher.cache import ResponseCache, request_key

log = logging.getLogger(__name__)

# the error of each named outcome starts with its text (the filter reads the prefix: stages/filter)
EMPTY_RESPONSE = "empty response"
TRUNCATED_RESPONSE = "truncated response (finish_reason=length)"
REASONING_BUDGET_EXHAUSTED = "reasoning exhausted the budget"
REASONING_FIELDS = ("reasoning_content", "reasoning")  # Ark, vLLM ≤ 0.10 / vLLM ≥ 0.11 (docs/teachers.md)


@dataclass(frozen=True)
class ChatRequest:
    """What to send. `key` identifies the answer (cache key); `context` feeds the template backend."""

    key: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    response_format: dict[str, Any] | None = None
    build: Callable[[], list[dict[str, Any]]] | None = None  # lazy messages, built (in a thread) only when sent


@dataclass
class ChatResult:
    """One request's outcome, as stored in the generations table."""

    key: str
    text: str = ""
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0  # every output token billed, reasoning included (OpenAI and Ark usage)
    reasoning: str = ""  # the hidden reasoning (never part of `text`)
    reasoning_tokens: int = 0  # usage.completion_tokens_details.reasoning_tokens (0 when not reported)
    latency_s: float = 0.0
    attempts: int = 0
    error: str = ""
    from_cache: bool = False

    def record(self) -> dict[str, Any]:
        """The JSON stored in the cache (everything but `from_cache`)."""
        return {k: v for k, v in self.__dict__.items() if k != "from_cache"}


class RetryableError(Exception):
    """A failure worth retrying; `retry_after` in seconds when the server said so."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimiter:
    """At most `rpm` request starts per minute (evenly spaced); rpm ≤ 0 = unlimited."""

    def __init__(self, rpm: int) -> None:
        self.interval = 60.0 / rpm if rpm > 0 else 0.0
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        if not self.interval:
            return
        async with self._lock:
            now = time.monotonic()
            delay = self._next - now
            self._next = max(now, self._next) + self.interval
        if delay > 0:
            await asyncio.sleep(delay)


Sender = Callable[[ChatRequest], Awaitable[ChatResult]]


class TeacherClient:
    """Sends requests with caching, concurrency, rate limit and retries (see module docstring)."""

    def __init__(self, params: TeacherParams, cache: ResponseCache,
                 template_writer: Callable[[ChatRequest], str] | None = None) -> None:
        self.params = params
        self.cache = cache
        self.template_writer = template_writer
        self.sent = 0  # requests actually sent to the endpoint (not cache hits), retries included
        self._openai: openai.AsyncOpenAI | None = None

    def _client(self) -> openai.AsyncOpenAI:
        if self._openai is None:
            key = os.environ.get(self.params.api_key_env, "")
            if not key and self.params.api_key_required:
                raise RuntimeError(f"environment variable {self.params.api_key_env} (the API key) is not set")
            # max_retries=0: our own policy below (jitter, Retry-After, garbage bodies) is the only retry
            self._openai = openai.AsyncOpenAI(base_url=self.params.base_url, api_key=key or "EMPTY",
                                              max_retries=0, timeout=self.params.timeout_s)
        return self._openai

    async def run_all(self, requests: Sequence[ChatRequest],
                      on_done: Callable[[ChatResult], None] | None = None) -> list[ChatResult]:
        """Complete every request (input order kept); cached answers are not sent again."""
        semaphore = asyncio.Semaphore(max(1, self.params.concurrency))
        limiter = RateLimiter(self.params.rpm)

        async def one(request: ChatRequest) -> ChatResult:
            key = cache_key(request.key, self.params)
            cached = self.cache.get(key)
            if cached is not None:
                result = ChatResult(**cached, from_cache=True)
            else:
                async with semaphore:
                    result = await self._with_retries(request, limiter)
                if result.finish_reason:  # an answer arrived (even empty or truncated): paid for, keep it
                    self.cache.put(key, result.record())
            if on_done is not None:
                on_done(result)
            return result

        try:
            return list(await asyncio.gather(*(one(r) for r in requests)))
        finally:
            if self._openai is not None:
                await self._openai.close()
                self._openai = None

    async def _with_retries(self, request: ChatRequest, limiter: RateLimiter) -> ChatResult:
        p = self.params
        start = time.monotonic()
        error = ""
        messages = request.messages
        if not messages and request.build is not None and p.backend != "template":
            messages = await asyncio.to_thread(request.build)  # image encoding off the event loop
        for attempt in range(1, p.max_retries + 2):
            await limiter.wait()
            try:
                result = await self._send(request, messages)
                result.attempts = attempt
                # the template backend is not timed: its output (and the table) stays byte-identical
                result.latency_s = 0.0 if p.backend == "template" else round(time.monotonic() - start, 4)
                return result
            except RetryableError as err:
                error = str(err)
                if attempt > p.max_retries:
                    break
                backoff = min(p.backoff_max_s, p.backoff_base_s * 2 ** (attempt - 1))
                delay = random.uniform(0, backoff)  # full jitter
                if err.retry_after is not None:
                    delay = max(delay, err.retry_after)
                log.debug("request %s attempt %d failed (%s); retrying in %.2fs", request.key[:12], attempt, err, delay)
                await asyncio.sleep(delay)
        return ChatResult(key=request.key, attempts=p.max_retries + 1, error=error,
                          latency_s=round(time.monotonic() - start, 4))

    async def _send(self, request: ChatRequest, messages: list[dict[str, Any]]) -> ChatResult:
        if self.params.backend == "template":
            if self.template_writer is None:
                raise RuntimeError("template backend needs a template writer")
            text = self.template_writer(request)
            return ChatResult(key=request.key, text=text, finish_reason="stop",
                              completion_tokens=len(text.split()))
        self.sent += 1
        kwargs: dict[str, Any] = {"model": self.params.model, "messages": messages,
                                  "temperature": self.params.temperature, "max_tokens": self.params.max_tokens}
        if request.response_format is not None:
            kwargs["response_format"] = request.response_format
        kwargs = {**provider_fields(self.params), **kwargs}  # params refuse extra_body keys the client writes
        try:
            # the SDK's documented low-level `post` (same transport, errors and ChatCompletion parsing as
            # `chat.completions.create`) skips its typed-params walk over every message part: ~1 ms CPU per
            # request (measured), the difference between 0.84 and 0.92 of ideal throughput at concurrency 32
            response = await self._client().post("/chat/completions", body=kwargs, cast_to=ChatCompletion)
        except openai.RateLimitError as err:
            raise RetryableError("429 rate limited", _retry_after(err)) from err
        except openai.APIStatusError as err:
            if err.status_code >= 500 or err.status_code == 408:
                raise RetryableError(f"{err.status_code} server error", _retry_after(err)) from err
            return ChatResult(key=request.key, error=f"{err.status_code}: {_short(err)}")
        except openai.APITimeoutError as err:
            raise RetryableError("timeout") from err
        except openai.APIConnectionError as err:
            raise RetryableError(f"connection error: {_short(err)}") from err
        except (openai.APIResponseValidationError, ValueError) as err:
            raise RetryableError(f"malformed response body: {_short(err)}") from err
        try:
            return _parse(request.key, response)
        except (AttributeError, TypeError, ValueError, IndexError, KeyError) as err:  # JSON, not a completion's shape
            raise RetryableError(f"malformed response body: {_short(err)}") from err


def outcome(error: str) -> str:
    """The named outcome of a result's error (its stable prefix), or the error itself; "" for none."""
    for name in (REASONING_BUDGET_EXHAUSTED, TRUNCATED_RESPONSE, EMPTY_RESPONSE):
        if error.startswith(name):
            return name
    return error


def provider_fields(params: TeacherParams) -> dict[str, Any]:
    """The provider fields of every request body: `teacher.extra_body` plus the named thinking switch.

    `ark` writes Volcengine Ark's `{"thinking": {"type": "enabled" | "disabled" | "auto"}}`; `chat_template`
    writes `{"chat_template_kwargs": {"enable_thinking": true | false}}` (vLLM / SGLang chat templates such as
    Qwen3's). `thinking: default` writes nothing (the provider's default). Plain JSON values (params hold
    read-only mappings and tuples).
    """
    fields = _plain(params.extra_body)
    if params.thinking != "default":
        key = THINKING_SWITCH_KEYS[params.thinking_switch]
        fields[key] = ({"type": params.thinking} if params.thinking_switch == "ark"
                       else {"enable_thinking": params.thinking == "enabled"})
    return fields


def cache_key(key: str, params: TeacherParams) -> str:
    """The response-cache key of a request whose caller-side key is `key`: the same key when no provider field is
    sent (caches written before provider fields existed stay valid), else a hash of the key and the fields — so
    the key changes with every field that changes the reply (extra_body, the thinking switch) and no other. The
    template backend sends nothing, so its key never changes."""
    fields = provider_fields(params) if params.backend != "template" else {}
    return request_key({"request": key, "provider_fields": fields}) if fields else key


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _reasoning_text(message: Any) -> str:
    """The hidden reasoning of a reply message: `reasoning_content` (Ark, vLLM reasoning parsers) or `reasoning`
    (vLLM's newer name); both are extra fields on the SDK's message model."""
    if message is None:
        return ""
    for name in REASONING_FIELDS:
        value = getattr(message, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _parse(key: str, response: Any) -> ChatResult:
    choices = getattr(response, "choices", None)
    if not choices:
        raise RetryableError("malformed response body: no choices")
    choice = choices[0]
    text = (choice.message.content if choice.message is not None else None) or ""
    usage = getattr(response, "usage", None)
    details = getattr(usage, "completion_tokens_details", None)
    result = ChatResult(key=key, text=text, finish_reason=choice.finish_reason or "",
                        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                        reasoning=_reasoning_text(choice.message),
                        reasoning_tokens=int(getattr(details, "reasoning_tokens", 0) or 0))
    thought = result.reasoning or result.reasoning_tokens
    if not text.strip() and result.finish_reason == "length" and thought:
        result.error = (f"{REASONING_BUDGET_EXHAUSTED}: finish_reason=length with empty content after "
                        f"{result.reasoning_tokens} reasoning tokens ({len(result.reasoning)} characters)")
    elif not text.strip():
        result.error = EMPTY_RESPONSE
    elif result.finish_reason == "length":
        result.error = TRUNCATED_RESPONSE + (f" after {result.reasoning_tokens} reasoning tokens" if thought else "")
    return result


def _retry_after(err: openai.APIStatusError) -> float | None:
    return parse_retry_after(err.response.headers if err.response is not None else {})


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms` (OpenAI) or `Retry-After` (seconds or an HTTP date); None if absent."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        if "retry-after-ms" in lowered:
            return max(0.0, float(lowered["retry-after-ms"]) / 1000)
        value = lowered.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value).timestamp()
            return max(0.0, when - (time.time() if now is None else now))
    except (TypeError, ValueError, IndexError):
        return None


def _short(err: Exception) -> str:
    return str(err).splitlines()[0][:200] if str(err) else type(err).__name__
