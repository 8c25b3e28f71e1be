"""`teacher`: the reasoning-trace teacher (template or an OpenAI-compatible endpoint)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from stages.core.params import NonNegFloat, NonNegInt, PosFloat, PosInt, SecretEnv
from stages.core.typed_config import Exp, Server


@dataclass(frozen=True)
class TeacherParams:
    backend: Server[Literal["template", "openai"]] = "template"  # template: offline, from annotations
    base_url: Server[str] = "https://ark.cn-beijing.volces.com/api/v3"  # any OpenAI-compatible endpoint
    model: Exp[str] = "doubao-1-5-thinking-vision-pro-250428"  # Seed1.5-VL on Volcengine Ark
    api_key_env: SecretEnv = "VRSFLOW_TEACHER_API_KEY"  # NAME of the env var holding the key (never the key)
    api_key_required: Server[bool] = True  # false for local servers without auth
    temperature: Exp[NonNegFloat] = 0.7
    max_tokens: Exp[PosInt] = 1024
    concurrency: Server[PosInt] = 32  # requests in flight
    timeout_s: Exp[PosFloat] = 120.0  # per request
    max_retries: Exp[NonNegInt] = 5  # on 429, 5xx, timeouts, connection errors, malformed bodies
    backoff_base_s: Exp[NonNegFloat] = 1.0  # exponential backoff base (full jitter)
    backoff_max_s: Exp[NonNegFloat] = 60.0
    rpm: Server[NonNegInt] = 0  # requests per minute limit; 0 = none
    # circuit breaker: stop sending after this many requests in a row failed for one transport / auth / server
    # reason (after their retries); 0 = never (docs/teachers.md)
    breaker_after: Exp[NonNegInt] = 20
    price_in_per_m: Exp[NonNegFloat] = 0.0  # USD per 1M prompt tokens, for the cost estimate
    price_out_per_m: Exp[NonNegFloat] = 0.0  # USD per 1M completion tokens
    image_size: Exp[PosInt] = 448  # longest side of frames sent to the teacher, pixels
    # provider fields merged into every request body (the OpenAI client's extra_body); JSON only (docs/teachers.md)
    extra_body: Exp[dict[str, Any]] = field(default_factory=dict)
    thinking: Exp[Literal["default", "enabled", "disabled", "auto"]] = "default"  # default: send no switch
    # how `thinking` is sent: ark = {"thinking": {"type": …}}; chat_template = chat_template_kwargs.enable_thinking
    thinking_switch: Server[Literal["ark", "chat_template"]] = "ark"
    # the template backend's Veason-R1 traces: full (three steps in sentences, ~175 tokens) | compact (three steps in
    # a few words each, the pre-trained base's own thought: pretrain.curriculum[*].think)
    template_style: Exp[Literal["full", "compact"]] = "full"

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.backoff_base_s > self.backoff_max_s:
            yield "backoff_base_s", f"must be ≤ backoff_max_s ({self.backoff_max_s:g}), got {self.backoff_base_s:g}"
        yield from _extra_body_rules(self.extra_body, self.thinking, self.thinking_switch)


# request-body keys the teacher client writes itself (extra_body may not override them); the keys each
# `teacher.thinking_switch` writes (stages/teacher/client.py `provider_fields` sends them)
TEACHER_BODY_KEYS = ("model", "messages", "temperature", "max_tokens", "response_format", "stream", "n")
THINKING_SWITCH_KEYS = {"ark": "thinking", "chat_template": "chat_template_kwargs"}


def _extra_body_rules(extra_body: Mapping[str, Any], thinking: str, switch: str) -> Iterator[tuple[str, str]]:
    import json

    try:
        json.dumps(_plain(extra_body), allow_nan=False)
    except (TypeError, ValueError) as err:
        yield "extra_body", f"must be JSON (mappings, lists, strings, finite numbers, true/false, null): {err}"
        return
    clash = sorted(set(extra_body) & set(TEACHER_BODY_KEYS))
    if clash:
        yield "extra_body", f"sets {clash}, which the client writes itself: set teacher.<key> instead"
    if thinking != "default" and THINKING_SWITCH_KEYS[switch] in extra_body:
        yield "thinking", (f"is {thinking!r} but extra_body already sets {THINKING_SWITCH_KEYS[switch]!r}: "
                           f"use one of the two")
    if thinking == "auto" and switch == "chat_template":
        yield "thinking", "'auto' has no chat_template switch (enable_thinking is true/false): use enabled or disabled"


def _plain(value: Any) -> Any:
    """Mappings (the read-only ones params hold) and tuples as dicts and lists, for JSON."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
