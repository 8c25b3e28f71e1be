"""The tiny tokenizer's two pre-tokenizers: GPT-2's byte-level regex (the default: numbers seen in training become
single tokens) and Qwen2's (`digits=True`: as a real Qwen2.5 tokenizer, every digit is a token of its own and
the space before a number is a piece of its own). Oracle: Qwen2's published splitting rule, not our code."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.tiny_models.tiny_qwen import build_tokenizer


@pytest.fixture(scope="module")
def tokenizers():
    return {digits: build_tokenizer(1024, 0, digits=digits) for digits in (False, True)}


def pieces(tokenizer, text: str) -> list[str]:
    return [tokenizer.decode([i]) for i in tokenizer(text)["input_ids"]]


def test_qwen2_pretokenizer_writes_numbers_digit_by_digit(tokenizers) -> None:
    box = '{"keyframe_timestamp": 12, "bbox_2d_list": [[52, 63, 107, 99]]}'
    digit_pieces = pieces(tokenizers[True], box)
    assert "".join(digit_pieces) == box
    numbers = [p for p in digit_pieces if any(c.isdigit() for c in p)]
    assert numbers == list("12") + list("2") + list("526310799")  # "2d" in bbox_2d_list: its digit stands alone too
    assert digit_pieces[digit_pieces.index("6") - 1] == " "  # ", 63": the space is a piece of its own
    whole = pieces(tokenizers[False], box)
    assert "".join(whole) == box and len(whole) < len(digit_pieces)
    assert any(sum(c.isdigit() for c in p) > 1 for p in whole)  # the default merges whole numbers


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2000), min_size=1, max_size=6))
def test_any_box_round_trips_and_every_digit_is_one_token(tokenizers, values) -> None:
    text = str(values)
    for tokenizer in tokenizers.values():
        assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert all(sum(c.isdigit() for c in p) <= 1 for p in pieces(tokenizers[True], text))
