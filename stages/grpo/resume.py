"""Exact resume for TRL's GRPOTrainer: a run killed at any step and rerun ends with the uninterrupted run's weights.

What a GRPO checkpoint must give back, and where each piece comes from:

- weights, optimizer, LR schedule, step count, log history: the Trainer's checkpoint (as for SFT);
- the generation RNG (sampling the rollouts): the Trainer saves every process's Python, numpy and torch RNG
  state (`rng_state[_RANK].pth`) and restores it after fast-forwarding the data to the checkpoint's step,
  before the first rollout of the rerun is generated;
- the rollouts in flight: TRL generates once per `steps_per_generation × num_iterations` optimizer steps and
  feeds the buffered rollouts to the steps between. The checkpoint does not hold that buffer, so checkpoints
  fall only where it is empty: `save_steps` is a multiple of the cycle (checked here; `train_trl` sets
  save_steps = grpo.save_every_steps × ppo_epochs with steps_per_generation = 1);
- the prompt order (the sampler's position): TRL's `RepeatSampler` draws a new shuffle from ONE seeded
  generator at every pass over the pool, and has no `set_epoch`. A rerun that resumes inside pass k started
  its generator afresh and drew the first pass's order instead of the k-th: other prompts, other rollouts,
  other weights (the kill at step 61 of the default run resumed in the 6th pass). `EpochRepeatSampler`
  re-derives pass k's order from the seed (the same k draws in the same order, so an uninterrupted run is
  unchanged) and the trainer sets it at the start of every pass;
- the reward keeps nothing between calls (`GroupReward` scores each prompt group from its inputs alone).
"""

from __future__ import annotations

from typing import Any


def resumable_trainer(**kwargs: Any):
    """A `trl.GRPOTrainer` (same arguments) whose checkpoints resume exactly; see the module docstring.

    Raises:
        ValueError: checkpoints would fall inside a generation cycle (rollouts in flight are not saved).
    """
    import torch
    from trl import GRPOTrainer
    from trl.trainer.utils import RepeatSampler

    class EpochRepeatSampler(RepeatSampler):
        """TRL's RepeatSampler whose pass k draws the k-th shuffle of its seeded generator whatever came before."""

        def set_epoch(self, epoch: int) -> None:
            if self.shuffle and self.seed is not None:
                self.generator.manual_seed(self.seed)
                for _ in range(epoch):  # the shuffles of the passes before, as RepeatSampler.__iter__ draws them
                    torch.randperm(self.num_samples, generator=self.generator)

    class ResumableGRPOTrainer(GRPOTrainer):
        _epoch_sampler: EpochRepeatSampler | None = None

        def _get_train_sampler(self, dataset=None):
            base = super()._get_train_sampler(dataset)
            if type(base) is not RepeatSampler:  # a TRL that samples otherwise: the resume test will say so
                return base
            self._epoch_sampler = EpochRepeatSampler(base.data_source, base.mini_repeat_count, base.batch_size,
                                                     base.repeat_count, base.shuffle, base.seed)
            return self._epoch_sampler

        def _run_epoch(self, *args, **kw):
            if self._epoch_sampler is not None:
                self._epoch_sampler.set_epoch(kw["epoch"] if "epoch" in kw else args[1])
            return super()._run_epoch(*args, **kw)

    args = kwargs["args"]
    cycle = args.steps_per_generation * args.num_iterations
    if args.save_strategy == "steps" and args.save_steps % cycle:
        raise ValueError(f"grpo: checkpoints every {args.save_steps} optimizer steps fall inside a generation cycle "
                         f"of {cycle} steps (its rollouts would be lost on resume)")
    return ResumableGRPOTrainer(**kwargs)
