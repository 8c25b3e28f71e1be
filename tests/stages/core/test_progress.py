"""Training loops stay quiet: a real transformers Trainer prints no per-step log dict and no per-step
FutureWarning, reports its progress to the flow's listener, and logs one short line every few steps."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from stages.core import progress
from stages.core.progress import quiet_library_deprecations, trainer_progress


class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict:
        return {"loss": ((self.layer(x).squeeze(-1) - labels) ** 2).mean()}


def _trainer(tmp_path, steps: int):
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    data = [{"x": torch.randn(2), "labels": torch.tensor(float(i % 3))} for i in range(8)]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=steps, logging_steps=1, report_to="none",
                             use_cpu=True, save_strategy="no", per_device_train_batch_size=2, learning_rate=0.1,
                             disable_tqdm=False)
    return Trainer(model=_Linear(), args=args, train_dataset=data)


def test_trainer_prints_short_lines_and_forwards_progress(tmp_path, capsys: pytest.CaptureFixture[str],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    trainer = _trainer(tmp_path, 20)
    trainer_progress(trainer, "toy training", every=10)
    seen: list[tuple[str, int, int]] = []
    progress.add_listener(lambda desc, done, total: seen.append((desc, done, total)))
    try:
        with caplog.at_level(logging.INFO, logger="vrsflow.progress"):
            trainer.train()
    finally:
        progress._listeners.clear()
    captured = capsys.readouterr()
    assert "'loss'" not in captured.out + captured.err  # the per-step dict of transformers' ProgressCallback
    lines = [r.getMessage() for r in caplog.records if r.name == "vrsflow.progress"]
    assert [line.split(":")[0] for line in lines] == ["toy training step 10/20", "toy training step 20/20"]
    assert all(len(line) <= 160 and "loss=" in line for line in lines)
    assert seen[-1] == ("toy training", 20, 20) and len(seen) == 20  # every step (total // 50 < 1)
    assert len(trainer.state.log_history) == 21  # the full log is still kept


def test_library_deprecations_are_quiet_inside_only() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_library_deprecations():
            warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning,
                          stacklevel=1)
        assert caught == []
        warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning,
                      stacklevel=1)
        assert len(caught) == 1
