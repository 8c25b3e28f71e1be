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

Noticing a teacher that cannot answer (docs/teachers.md): a pre-flight call (the endpoint's model list) before
the first request is sent, so an unreachable host, a refused key or an unknown model is one line within seconds;
a circuit breaker that stops sending once `teacher.breaker_after` requests in a row failed for one transport, auth
or server reason; a warning when most of the recent requests fail; and `refuse_failures`, the floor under which
a stage may not call its run a success. Each of these raises `TeacherUnavailable` (one line: what failed, how
many answers are kept in the cache, how to resume); answers received stay in the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import os
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from stages.core.errors import OneLineError
from stages.params.teacher import THINKING_SWITCH_KEYS, TeacherParams
from stages.teacher.cache import ResponseCache, request_key

log = logging.getLogger(__name__)

# the error of each named outcome starts with its text (the filter reads the prefix: stages/filter)
EMPTY_RESPONSE = "empty response"
TRUNCATED_RESPONSE = "truncated response (finish_reason=length)"
REASONING_BUDGET_EXHAUSTED = "reasoning exhausted the budget"
REASONING_FIELDS = ("reasoning_content", "reasoning")  # Ark, vLLM ≤ 0.10 / vLLM ≥ 0.11 (docs/teachers.md)
NOT_SENT = "not sent: circuit breaker open"  # the error of a request the open breaker kept back
# the pre-flight's own time limit: an unreachable host is one line within seconds, not after `timeout_s` (120 s)
PREFLIGHT_TIMEOUT_S = 15.0
RECENT_REQUESTS = 20  # the window of the "most recent requests failed" warning
# statuses about one request's content: every other failure kind is the endpoint's (transport, auth, model, server)
CONTENT_STATUSES = ("400", "413", "422")


class TeacherUnavailable(OneLineError, RuntimeError):
    """The teacher cannot answer: the pre-flight failed, the circuit breaker opened, or more requests went
    unanswered than the stage allows. The message is the one line to show; answers received stay in the cache."""


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
                 template_writer: Callable[[ChatRequest], str] | None = None, stage: str = "teacher",
                 preflight: bool = True) -> None:
        self.params = params
        self.cache = cache
        self.template_writer = template_writer
        self.stage = stage  # names the stage in the one-line errors
        self.sent = 0  # requests actually sent to the endpoint (not cache hits), retries included
        self.checked = not preflight or params.backend == "template"  # the pre-flight ran (or is not wanted)
        self.breaker = ""  # the error that opened the circuit breaker; "" while it is closed
        self._streak: tuple[str, int] = ("", 0)  # the failure kind of the latest requests, how many in a row
        self._recent: deque[bool] = deque(maxlen=RECENT_REQUESTS)  # failed or not, of the latest requests sent
        self._warned = False
        self._opened = asyncio.Event()  # set with `breaker` (made anew in each run_all: one per event loop)
        self._openai: openai.AsyncOpenAI | None = None

    def _client(self) -> openai.AsyncOpenAI:
        if self._openai is None:
            self._openai = self._new_client(self.params.timeout_s)
        return self._openai

    def _new_client(self, timeout_s: float) -> openai.AsyncOpenAI:
        key = os.environ.get(self.params.api_key_env, "")
        if not key and self.params.api_key_required:
            raise TeacherUnavailable(f"environment variable {self.params.api_key_env} (the API key) is not set")
        # max_retries=0: our own policy below (jitter, Retry-After, garbage bodies) is the only retry
        return openai.AsyncOpenAI(base_url=self.params.base_url, api_key=key or "EMPTY", max_retries=0,
                                  timeout=timeout_s)

    async def run_all(self, requests: Sequence[ChatRequest],
                      on_done: Callable[[ChatResult], None] | None = None) -> list[ChatResult]:
        """Complete every request (input order kept); cached answers are not sent again.

        Raises:
            TeacherUnavailable: the pre-flight (before the first request this client sends) failed, or the
                circuit breaker opened; every answer received is in the cache by then.
        """
        semaphore = asyncio.Semaphore(max(1, self.params.concurrency))
        limiter = RateLimiter(self.params.rpm)
        self._opened = asyncio.Event()
        keys = [cache_key(r.key, self.params) for r in requests]
        cached = [self.cache.get(key) for key in keys]

        async def one(request: ChatRequest, key: str, record: dict | None) -> ChatResult:
            if record is not None:
                result = ChatResult(**record, from_cache=True)
            else:
                async with semaphore:
                    if self.breaker:
                        result = ChatResult(key=request.key, error=f"{NOT_SENT} ({self.breaker})")
                    else:
                        result = await self._with_retries(request, limiter)
                        self._note(result)
                if result.finish_reason:  # an answer arrived (even empty or truncated): paid for, keep it
                    self.cache.put(key, result.record())
            if on_done is not None:
                on_done(result)
            return result

        try:
            if not self.checked and any(record is None for record in cached):
                await self.preflight()
            results = list(await asyncio.gather(*(one(*args) for args in zip(requests, keys, cached, strict=True))))
        finally:
            if self._openai is not None:
                await self._openai.close()
                self._openai = None
        if self.breaker:
            answered = sum(bool(r.finish_reason) for r in results)
            raise TeacherUnavailable(
                f"{self.stage}: the teacher at {self.params.base_url} failed {self.params.breaker_after} requests "
                f"in a row ({self.breaker}), so the stage stopped sending; {answered} of {len(results)} requests "
                f"are answered and kept in the cache {self.cache.folder}: once the teacher answers again, rerun the "
                f"stage — only the {len(results) - answered} unanswered are sent")
        return results

    async def preflight(self) -> None:
        """One cheap call before the first request is sent: the endpoint's model list (and, only when that list
        lacks `teacher.model`, one request of one token, as some providers list fewer models than they serve).

        Raises:
            TeacherUnavailable: the host cannot be reached, the key is refused, or the model is unknown (one line
                naming teacher.base_url / teacher.model and the cause). Any other answer lets the run go on: the
                requests' own retries and the circuit breaker take over.
        """
        self.checked = True
        if self.params.backend == "template":
            return
        async with self._new_client(min(self.params.timeout_s, PREFLIGHT_TIMEOUT_S)) as client:
            await self._check(client)

    async def _check(self, client: openai.AsyncOpenAI) -> None:
        p = self.params
        try:
            page = await client.models.list()
            served = [str(getattr(m, "id", "")) for m in page.data]
        except openai.APIStatusError as err:
            self._refuse_key(err)
            return  # no model list here (or a busy server): the first requests tell
        except openai.APIConnectionError as err:
            raise TeacherUnavailable(self._unreachable(err)) from None
        except (openai.APIResponseValidationError, ValueError, TypeError, AttributeError):
            return  # an answer that is no model list: the host is up
        if p.model in served:
            return
        body = {**provider_fields(p), "model": p.model, "messages": [{"role": "user", "content": "Say OK."}],
                "max_tokens": 1}
        try:
            self.sent += 1
            await client.post("/chat/completions", body=body, cast_to=ChatCompletion)
        except openai.APIStatusError as err:
            self._refuse_key(err)
            if err.status_code == 404:
                listed = ", ".join(served[:8]) + (", …" if len(served) > 8 else "")
                raise TeacherUnavailable(
                    f"{self.stage}: teacher.model {p.model!r} is unknown at teacher.base_url {p.base_url} "
                    f"(404: {_short(err)}; it lists: {listed or 'no models'}); nothing was written") from None
        except openai.APIConnectionError as err:
            raise TeacherUnavailable(self._unreachable(err)) from None
        except (openai.APIResponseValidationError, ValueError, TypeError, AttributeError):
            pass  # an answer: the model exists

    def _refuse_key(self, err: openai.APIStatusError) -> None:
        if err.status_code in (401, 403):
            p = self.params
            key = "is set" if os.environ.get(p.api_key_env) else "is not set"
            raise TeacherUnavailable(
                f"{self.stage}: teacher.base_url {p.base_url} refused the API key ({err.status_code}: {_short(err)}; "
                f"${p.api_key_env} {key}): set a valid key in that variable; nothing was sent or written") from None

    def _unreachable(self, err: openai.APIConnectionError) -> str:
        p = self.params
        if isinstance(err, openai.APITimeoutError):
            cause = f"no answer within {min(p.timeout_s, PREFLIGHT_TIMEOUT_S):g} s"
        else:
            cause = _root_cause(err)
        return (f"{self.stage}: teacher.base_url {p.base_url} is unreachable ({cause}): check the URL and that "
                "the server is up; nothing was sent or written")

    def _note(self, result: ChatResult) -> None:
        """Feed a sent request's outcome to the circuit breaker and the recent-failures warning."""
        failed = not result.finish_reason
        self._recent.append(failed)
        if failed:
            kind = failure_kind(result.error)
            self._streak = (kind, self._streak[1] + 1 if self._streak[0] == kind else 1)
            limit = self.params.breaker_after
            if limit and self._streak[1] >= limit and kind not in CONTENT_STATUSES and not self.breaker:
                self.breaker = result.error
                self._opened.set()
        else:
            self._streak = ("", 0)
        failures = sum(self._recent)
        if len(self._recent) == RECENT_REQUESTS and failures > RECENT_REQUESTS // 2 and not self._warned:
            self._warned = True
            log.warning("%s: %d of the last %d teacher requests failed (latest: %s); answered ones are cached",
                        self.stage, failures, RECENT_REQUESTS, result.error or "none")
        elif failures <= RECENT_REQUESTS // 4:
            self._warned = False

    async def _with_retries(self, request: ChatRequest, limiter: RateLimiter) -> ChatResult:
        p = self.params
        start = time.monotonic()
        error = ""
        messages = request.messages
        if not messages and request.build is not None and p.backend != "template":
            messages = await asyncio.to_thread(request.build)  # image encoding off the event loop
        tried = 0
        for attempt in range(1, p.max_retries + 2):
            if attempt > 1 and self.breaker:
                break  # the endpoint is down: retrying would only delay the stop
            await limiter.wait()
            tried = attempt
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
                with contextlib.suppress(TimeoutError):  # the backoff, cut short when the breaker opens
                    await asyncio.wait_for(self._opened.wait(), delay)
        return ChatResult(key=request.key, attempts=tried, error=error,
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


def failure_kind(error: str) -> str:
    """The kind of an unanswered request's error: its text before the first ':' ("connection error", "timeout",
    "401", "404"), every 5xx one kind. Requests failing for one kind in a row open the circuit breaker."""
    kind = error.split(":", 1)[0].strip()
    return "5xx server error" if kind[:1] == "5" and kind[:3].isdigit() else kind


def refuse_failures(stage: str, errors: Sequence[str], total: int, max_share: float, key: str,
                    cache: ResponseCache, unit: str = "requests") -> None:
    """The floor under which a stage may not call its run a success.

    Args:
        stage: the stage's name (starts the line).
        errors: the error of every unanswered request (or sample).
        total: how many there were in all.
        max_share: the largest share of `total` that may go unanswered (`<stage>.max_error_share`).
        key: the params key of `max_share`, named in the line.
        cache: the response cache the answered ones are kept in.
        unit: what `total` counts.

    Raises:
        TeacherUnavailable: more than `max_share` of `total` unanswered (one line: how many, the most common
            kind, what is kept, how to resume).
    """
    if not total or len(errors) / total <= max_share:
        return
    kind, count = Counter(failure_kind(e) for e in errors).most_common(1)[0]
    raise TeacherUnavailable(
        f"{stage}: {len(errors)} of {total} {unit} went unanswered by the teacher ({len(errors) / total:.0%}, more "
        f"than {key} = {max_share:g}; {count} of them: {kind}); the {total - len(errors)} answered are kept in the "
        f"cache {cache.folder} and nothing is recorded as done: fix the teacher and rerun the stage — only the "
        "unanswered are sent")


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


def _root_cause(err: BaseException) -> str:
    """The innermost cause's message (the transport's "All connection attempts failed", a DNS error), not the
    SDK's "Connection error."."""
    while err.__cause__ is not None:
        err = err.__cause__
    return _short(err)  # type: ignore[arg-type]


def _short(err: Exception) -> str:
    return str(err).splitlines()[0][:200] if str(err) else type(err).__name__
