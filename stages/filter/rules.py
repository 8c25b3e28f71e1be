"""Filter rules: each returns the reason a trace is rejected, or None. Pure functions on text + ground truth.

The rules of the papers (three steps; the given keyframe and no other; no mention of the marks; length
bounds; no refusal; no near-duplicate; RCoT-Seg's AKS option check) plus a faithfulness check: the
location words of step 3 must agree with where the ground-truth box is at the keyframe.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from stages.teacher.template_teacher import location_of, union_box

STEP_RE = re.compile(r"(?im)^\s*\**\s*step\s*([123])\s*[:.)]")
TIMESTAMP_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:s\b|sec\b|secs\b|seconds?\b)", re.I)
MARKING_RE = re.compile(
    r"\b(red\s+(?:rectangles?|boxe?s?|frames?|outlines?|borders?|marks?|markings?)|bounding\s+box(?:es)?|"
    r"rectangles?|highlighted|outlined|marked|markings?|annotat\w*)\b", re.I)
REFUSAL_RE = re.compile(
    r"\b(i'?m\s+sorry|i\s+am\s+sorry|i\s+apologi[sz]e|apologies|i\s+cannot|i\s+can'?t|i\s+am\s+unable|"
    r"i'?m\s+unable|as\s+an\s+ai)\b", re.I)
ANSWER_OPTION_RE = re.compile(r"answer\s*[:：]\s*\(?\s*([AB])\b", re.I)
HORIZONTAL = {"left": "left", "right": "right"}
VERTICAL = {"top": "top", "upper": "top", "bottom": "bottom", "lower": "bottom"}
CENTRE_RE = re.compile(r"\b(centre|center|middle)\b", re.I)
WORD_RE = re.compile(r"\b(left|right|top|upper|bottom|lower)\b", re.I)


def split_steps(text: str) -> dict[int, str] | None:
    """{1: …, 2: …, 3: …} when the trace has each step exactly once, in order; else None."""
    marks = [(int(m.group(1)), m.start(), m.end()) for m in STEP_RE.finditer(text)]
    if [n for n, _, _ in marks] != [1, 2, 3]:
        return None
    bounds = [m[2] for m in marks]
    ends = [m[1] for m in marks[1:]] + [len(text)]
    return {n: text[start:end].strip() for (n, _, _), start, end in zip(marks, bounds, ends, strict=True)}


def three_steps(text: str) -> str | None:
    return None if split_steps(text) is not None else "missing_steps"


def keyframe_named(text: str, keyframe: int, shown: Sequence[int]) -> str | None:
    """Step 2 names the given keyframe's timestamp and no other shown timestamp."""
    steps = split_steps(text)
    if steps is None:
        return "missing_steps"
    mentioned = {float(m.group(1)) for m in TIMESTAMP_RE.finditer(steps[2])}
    if float(keyframe) not in mentioned:
        return "keyframe_not_named"
    others = {t for t in mentioned if t != float(keyframe) and t in {float(s) for s in shown}}
    return "other_keyframe_named" if others else None


QUOTED_RE = re.compile(r"\"[^\"]*\"|“[^”]*”")


def unquoted(text: str) -> str:
    """The text without quoted passages (the expression itself may say "left" or "marked")."""
    return QUOTED_RE.sub(" ", text)


def no_markings(text: str) -> str | None:
    return "mentions_markings" if MARKING_RE.search(unquoted(text)) else None


def length_within(text: str, min_chars: int, max_chars: int) -> str | None:
    n = len(text.strip())
    return "too_short" if n < min_chars else "too_long" if n > max_chars else None


def no_refusal(text: str) -> str | None:
    return "refusal" if REFUSAL_RE.search(text) else None


def not_near_duplicate(text: str, accepted: Sequence[str], ratio: float) -> str | None:
    """Compared with traces already accepted for the same sample."""
    for other in accepted:
        if difflib.SequenceMatcher(None, text, other, autojunk=False).ratio() >= ratio:
            return "near_duplicate"
    return None


def aks_option_matches(text: str, expected: str) -> str | None:
    """RCoT-Seg: keep an AKS trace only if its final option equals the ground truth."""
    options = ANSWER_OPTION_RE.findall(text)
    if not options:
        return "aks_no_option"
    return None if options[-1].upper() == expected else "aks_wrong_option"


def location_faithful(text: str, key_boxes: Sequence[Sequence[float] | None], size: float) -> str | None:
    """Step 3's location words must not contradict the ground-truth box at the keyframe.

    A horizontal word (left/right) is contradicted when the target's box centre lies in the opposite
    third of the frame; a vertical word (top/upper, bottom/lower) likewise; "centre/middle" when the
    centre is in an outer third along both axes. Several targets: the union box.
    """
    steps = split_steps(text)
    if steps is None:
        return "missing_steps"
    box = union_box(key_boxes)
    if box is None:
        return None
    horizontal, vertical = location_of(box, size, size)
    step3 = unquoted(steps[3])
    said = {w.lower() for w in WORD_RE.findall(step3)}
    for word in said:
        if word in HORIZONTAL:
            opposite = "right" if word == "left" else "left"
            if horizontal == opposite:
                return "location_contradicts_box"
        elif VERTICAL[word] != vertical and vertical != "middle":
            return "location_contradicts_box"
    if CENTRE_RE.search(step3) and horizontal != "centre" and vertical != "middle" and not said:
        return "location_contradicts_box"
    return None
