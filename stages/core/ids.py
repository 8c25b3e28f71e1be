"""Stable identifiers shared by every stage."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def expression_id(video: str, exp_id: str) -> str:
    """`<video>#<exp_id>`: unique over both splits of a ReVOS-layout dataset."""
    return f"{video}#{exp_id}"


def sample_id(expr_id: str) -> str:
    """A stable id without dots or slashes (WebDataset keys cannot hold a dot), still readable.

    The short hash keeps ids unique when sanitising maps two different keys to the same text.
    """
    readable = _UNSAFE.sub("_", expr_id).strip("_")
    digest = hashlib.sha1(expr_id.encode()).hexdigest()[:8]
    return f"{readable}-{digest}"
