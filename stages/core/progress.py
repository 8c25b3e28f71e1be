"""Progress reporting without an orchestrator dependency.

Stages wrap their per-item loops in `track(...)`: a tqdm bar on the terminal, and — when a flow has
registered a listener — the same progress forwarded (e.g. to a Prefect progress artifact). Training loops
of transformers / TRL get the same through `trainer_progress`, and `quiet_library_deprecations` keeps the
libraries' per-step FutureWarnings off the console. A running stage shows its curves so far through
`publish_markdown` (the flow's markdown listener: the stage's Prefect report artifact, updated in place).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tqdm import tqdm

T = TypeVar("T")
Listener = Callable[[str, int, int], None]  # (description, done, total)
_listeners: list[Listener] = []
_markdown_listeners: list[Callable[[str], None]] = []
_log = logging.getLogger("vrsflow.progress")


def add_listener(listener: Listener) -> None:
    """Register a callback receiving (description, done, total) about every 2 % of progress."""
    _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    """Unregister a callback added with `add_listener`."""
    if listener in _listeners:
        _listeners.remove(listener)


def add_markdown_listener(listener: Callable[[str], None]) -> None:
    """Register a callback receiving the running stage's report so far (markdown: its curves while it trains)."""
    _markdown_listeners.append(listener)


def remove_markdown_listener(listener: Callable[[str], None]) -> None:
    """Unregister a callback added with `add_markdown_listener`."""
    if listener in _markdown_listeners:
        _markdown_listeners.remove(listener)


def wants_markdown() -> bool:
    """Whether anyone listens for reports so far (drawing them costs time: skip it when not)."""
    return bool(_markdown_listeners)


def publish_markdown(markdown: str) -> None:
    """Hand the running stage's report so far to the markdown listeners (nothing when it is empty)."""
    if markdown:
        for listener in list(_markdown_listeners):
            listener(markdown)


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
        self.total, self.desc, self.done, self.errors = total, desc, 0, 0
        self._step = max(1, total // 50)
        self._bar = tqdm(total=total or None, desc=desc, leave=False, mininterval=1.0)

    def advance(self, n: int = 1, errors: int = 0) -> None:
        """Record n more finished items, `errors` of which failed (shown on the bar once there is one)."""
        self.done += n
        if errors:
            self.errors += errors
            self._bar.set_postfix_str(f"errors={self.errors}", refresh=False)
        self._bar.update(n)
        if _listeners and (self.done % self._step == 0 or self.done == self.total):
            for listener in list(_listeners):
                listener(self.desc, self.done, self.total)

    def close(self) -> None:
        """Close the terminal bar."""
        self._bar.close()


# -- training loops of transformers / TRL ------------------------------------------------------------------

LIBRARY_MODULES = r"(transformers|trl|peft|accelerate)(\.|$)"
# deprecation notices the libraries print on every training step (addressed to library users, not ours)
DEPRECATION_MESSAGES = (r"`gradient_checkpointing` is deprecated", r"`is_gradient_checkpointing` is deprecated")
TRAINER_LOG_KEYS = ("loss", "reward", "reward_std", "kl", "completions/mean_length", "learning_rate")


@contextmanager
def quiet_library_deprecations() -> Iterator[None]:
    """Inside: FutureWarnings raised by transformers / TRL / PEFT / accelerate (and the per-step deprecation
    notices named in DEPRECATION_MESSAGES) are not printed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=LIBRARY_MODULES)
        for message in DEPRECATION_MESSAGES:
            warnings.filterwarnings("ignore", message=message, category=FutureWarning)
        yield


def trainer_progress(trainer: Any, desc: str, every: int = 10) -> None:
    """Replace a transformers `Trainer`'s console output — a tqdm bar that also prints the whole log dict
    (~1.5 KB) at every logged step — with one vrsflow progress bar (forwarded to the flow's listeners, i.e. the
    Prefect progress artifact) and one short line every `every` steps (loss, reward, KL, length). The full
    log stays in `trainer.state.log_history`."""
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from stages.core.report import summary_line

    class _Progress(TrainerCallback):
        reporter: ProgressReporter | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                self.reporter = ProgressReporter(int(state.max_steps), desc)
                if state.global_step:  # resumed
                    self.reporter.advance(int(state.global_step))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.reporter is not None:
                self.reporter.advance()

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            step, total = int(state.global_step), int(state.max_steps)
            if self.reporter is None or not logs or "train_runtime" in logs:
                return
            if step % every == 0 or step == total:
                values = {k.split("/")[-1]: logs[k] for k in TRAINER_LOG_KEYS if k in logs}
                _log.info(summary_line(f"{desc} step {step}/{total}", values))

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.reporter is not None:
                self.reporter.close()
                self.reporter = None

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(_Progress())
