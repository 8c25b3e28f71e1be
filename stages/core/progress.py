"""Progress reporting without an orchestrator dependency.

Stages wrap their per-item loops in `track(...)`: a tqdm bar on the terminal, and — when a flow has
registered a listener — the same progress forwarded (e.g. to a Prefect progress artifact).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
Listener = Callable[[str, int, int], None]  # (description, done, total)
_listeners: list[Listener] = []


def add_listener(listener: Listener) -> None:
    """Register a callback receiving (description, done, total) about every 2 % of progress."""
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    """Unregister a callback added with `add_listener`."""
    if listener in _listeners:
        _listeners.remove(listener)


def track(items: Iterable[T], total: int | None = None, desc: str = "") -> Iterator[T]:
    """Iterate `items` with a progress bar and listener notifications."""
    if total is None:
        total = len(items) if hasattr(items, "__len__") else 0  # type: ignore[arg-type]
    step = max(1, total // 50)
    done = 0
    with tqdm(total=total or None, desc=desc, leave=False, mininterval=1.0) as bar:
        for item in items:
            yield item
            done += 1
            bar.update(1)
            if _listeners and (done % step == 0 or done == total):
                for listener in list(_listeners):
                    listener(desc, done, total)


class ProgressReporter:
    """Manual progress (for callbacks, e.g. async completions): `advance()` once per finished item."""

    def __init__(self, total: int, desc: str = "") -> None:
        self.total, self.desc, self.done = total, desc, 0
        self._step = max(1, total // 50)
        self._bar = tqdm(total=total or None, desc=desc, leave=False, mininterval=1.0)

    def advance(self, n: int = 1) -> None:
        """Record n more finished items."""
        self.done += n
        self._bar.update(n)
        if _listeners and (self.done % self._step == 0 or self.done == self.total):
            for listener in list(_listeners):
                listener(self.desc, self.done, self.total)

    def close(self) -> None:
        """Close the terminal bar."""
        self._bar.close()
