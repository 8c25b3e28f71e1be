"""Filter rules: each returns the reason a trace is rejected, or None. Pure functions on text + ground truth.

The rules of the papers (three steps; the given keyframe and no other; no mention of the marks; length
bounds; no refusal; no near-duplicate; RCoT-Seg's AKS option check) plus a faithfulness check: the
location words of step 3 must agree with where the ground-truth box is at the keyframe.

Trace styles accepted (teachers and the published Veason-R1 traces write them): steps as "Step 1:" (also
bold or "Step 1." / "Step 1)") or as a numbered list "1." / "1)"; a timestamp as "4s", "4 seconds",
"<4s>", "timestamp 4", "the frame at timestamp 4", "frame 4" or "second 4". Location words that describe
motion ("moving right", "heads towards the top", "from the left") or a relation to another object ("left of
the car") are not claims about where the target is. The location logic here is the filter's own (box centre
in thirds of the frame): it shares nothing with the teacher that writes the traces.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

STEP_RE = re.compile(r"(?im)^[ \t]*[#*_]*[ \t]*step[ \t]*([123])[ \t]*[*_]*[ \t]*[:.)\-–]")
NUMBERED_RE = re.compile(r"(?m)^[ \t]*[#*_]*[ \t]*([123])[ \t]*[.)][ \t]")
TIMESTAMP_PATTERNS = (
    re.compile(r"<\s*(\d+(?:\.\d+)?)\s*s\s*>", re.I),
    re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b", re.I),
    re.compile(r"\btimestamps?\s*(?:of\s+|=\s*|:\s*|is\s+)?(\d+(?:\.\d+)?)\b(?!\s*%)", re.I),
    re.compile(r"\bframes?\s*(?:#\s*|no\.?\s*|number\s+)?(\d+)\b(?!\s*(?:frames|%))", re.I),
    re.compile(r"\bsecond\s+(\d+)\b", re.I),
)
MARKING_RE = re.compile(
    r"\b(red\s+(?:rectangles?|boxe?s?|frames?|outlines?|borders?|marks?|markings?)|bounding\s+box(?:es)?|"
    r"rectangles?|highlighted|outlined|marked|markings?|annotat\w*)\b", re.I)
REFUSAL_RE = re.compile(
    r"\b(i'?m\s+sorry|i\s+am\s+sorry|i\s+apologi[sz]e|apologies|i\s+cannot|i\s+can'?t|i\s+am\s+unable|"
    r"i'?m\s+unable|as\s+an\s+ai)\b", re.I)
ANSWER_OPTION_RE = re.compile(r"answer\s*[:：]\s*\(?\s*(?:option\s+)?([AB])\b", re.I)
DIRECTION = r"(?:left|right|top|bottom|upper|lower|up|down|centre|center|middle)"
# phrases whose direction words are motion, origin or a relation, not the target's place in the frame
MOTION_RE = re.compile(
    r"\b(?:mov\w*|head\w*|go(?:es|ing)?|went|walk\w*|run\w*|ran|driv\w*|drove|travel\w*|turn\w*|swim\w*|swam|"
    r"fl(?:y|ies|ying|ew)|roll\w*|drift\w*|glid\w*|slid\w*|jump\w*|ris\w*|fall\w*|fell|pass\w*|step\w*|"
    r"crawl\w*|rac\w*|shift\w*|steer\w*|lean\w*|look\w*|fac\w*|point\w*)"
    rf"(?:\s+(?:\w+ly|back|away|off|over|across|on))?\s+(?:to(?:wards?)?\s+|in(?:to)?\s+)?(?:the\s+)?{DIRECTION}"
    rf"(?:\s+(?:(?:and|or)\s+(?:the\s+)?)?{DIRECTION})?(?:\s+(?:side|edge|corner|part))?\b"
    rf"|\b(?:towards?|from|leftwards|rightwards|upwards|downwards)\s+(?:the\s+)?{DIRECTION}?"
    rf"(?:\s+(?:(?:and|or)\s+(?:the\s+)?)?{DIRECTION})?(?:\s+(?:side|edge|corner|part))?\b"
    r"|\b(?:to\s+the\s+|on\s+the\s+)?(?:left|right)\s+of\b"
    r"(?!\s+(?:the\s+)?(?:frame|image|picture|scene|video|screen|view|shot)\b)",
    re.I)
WORD_RE = re.compile(r"\b(left|right|top|upper|bottom|lower)\b", re.I)
CENTRE_RE = re.compile(r"\b(centre|center|middle)\b", re.I)
HORIZONTAL_SIDE = {"left": "left", "right": "right"}
VERTICAL_SIDE = {"top": "top", "upper": "top", "bottom": "bottom", "lower": "bottom"}


def _marks(pattern: re.Pattern, text: str) -> list[tuple[int, int, int]]:
    return [(int(m.group(1)), m.start(), m.end()) for m in pattern.finditer(text)]


def split_steps(text: str) -> dict[int, str] | None:
    """{1: …, 2: …, 3: …} when the trace has each step exactly once, in order ("Step k" or a numbered
    list "k."), else None."""
    for pattern in (STEP_RE, NUMBERED_RE):
        marks = _marks(pattern, text)
        if [n for n, _, _ in marks] == [1, 2, 3]:
            starts = [m[2] for m in marks]
            ends = [m[1] for m in marks[1:]] + [len(text)]
            return {n: text[s:e].strip() for (n, _, _), s, e in zip(marks, starts, ends, strict=True)}
    return None


def three_steps(text: str) -> str | None:
    return None if split_steps(text) is not None else "missing_steps"


def mentioned_timestamps(text: str) -> set[float]:
    """Every timestamp the text names, in any of the accepted styles."""
    return {float(m.group(1)) for pattern in TIMESTAMP_PATTERNS for m in pattern.finditer(text)}


def keyframe_named(text: str, keyframe: int, shown: Sequence[int]) -> str | None:
    """Step 2 or 3 names the given keyframe's timestamp, and step 2 names no other shown timestamp (the
    published traces name the keyframe in step 2 or only in step 3: "3. In frame 41, …")."""
    steps = split_steps(text)
    if steps is None:
        return "missing_steps"
    in_step2 = mentioned_timestamps(steps[2])
    if float(keyframe) not in in_step2 | mentioned_timestamps(steps[3]):
        return "keyframe_not_named"
    others = {t for t in in_step2 if t != float(keyframe) and t in {float(s) for s in shown}}
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


def box_thirds(boxes: Sequence[Sequence[float] | None], size: float) -> tuple[str, str] | None:
    """Where the centre of the boxes' union lies: ("left"|"centre"|"right", "top"|"middle"|"bottom") by thirds
    of a size × size frame; None when no box is present."""
    present = [b for b in boxes if b is not None]
    if not present:
        return None
    x1 = min(float(b[0]) for b in present)
    y1 = min(float(b[1]) for b in present)
    x2 = max(float(b[2]) for b in present)
    y2 = max(float(b[3]) for b in present)
    cx, cy = (x1 + x2) / 2 / size, (y1 + y2) / 2 / size
    column = "left" if cx < 1 / 3 else "right" if cx > 2 / 3 else "centre"
    row = "top" if cy < 1 / 3 else "bottom" if cy > 2 / 3 else "middle"
    return column, row


def location_claims(text: str) -> tuple[set[str], bool]:
    """(side words claimed, whether "centre/middle" is claimed) in a step, quoted text, motion, origin and
    relations to other objects left out."""
    plain = MOTION_RE.sub(" ", unquoted(text))
    return {w.lower() for w in WORD_RE.findall(plain)}, bool(CENTRE_RE.search(plain))


def location_faithful(text: str, key_boxes: Sequence[Sequence[float] | None], size: float) -> str | None:
    """Step 3's location words must not contradict the ground-truth box at the keyframe.

    A horizontal word (left/right) is contradicted when the target's box centre lies in the opposite
    third of the frame; a vertical word (top/upper, bottom/lower) likewise; "centre/middle" alone when the
    centre is in an outer third along both axes. Several targets: the box around all of them.
    """
    steps = split_steps(text)
    if steps is None:
        return "missing_steps"
    place = box_thirds(key_boxes, size)
    if place is None:
        return None
    column, row = place
    said, centre = location_claims(steps[3])
    for word in said:
        if word in HORIZONTAL_SIDE:
            if column not in ("centre", HORIZONTAL_SIDE[word]):
                return "location_contradicts_box"
        elif row not in ("middle", VERTICAL_SIDE[word]):
            return "location_contradicts_box"
    if centre and not said and column != "centre" and row != "middle":
        return "location_contradicts_box"
    return None
