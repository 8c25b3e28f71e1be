"""verl's synchronous v1 trainer with prompt-group ids that are a function of (seed, step, position, sample id)
instead of `uuid.uuid4()`, so the rows of a training batch come in the same order in every run.

Why: verl 0.9.1's replay buffer orders a step's prompt groups by `sorted(sampleable_keys, key=global_steps)`
over a *set* of their uids (`verl/trainer/ppo/v1/replay_buffer.py`, `_select_prompt_uids`); with random uids
(`trainer_base.py`, `_fetch_one_gen_batch`) the batch order, and with it the order in which the actor's
micro-batches add their gradients, changes from run to run. With fixed uids and a fixed `PYTHONHASHSEED` (the job
sets both) the set's order is the same every time.

It reaches verl through verl's own extension points: its trainer registry (`register_trainer`, selected with
`trainer.v1.trainer_mode`), filled in every process of the job because verl imports the modules named in
`VERL_USE_EXTERNAL_MODULES` on `import verl` (set in the job's Ray runtime env: `trainer_overrides`). The class
hands verl's base trainer the mode `sync`, whose code paths it is (verl branches on the mode's name).

NOT RUN YET under verl's trainer (issue 62: written without the rehearsal venv); its unit test drives
`_fetch_one_gen_batch` on a stand-in data loader.
"""

from __future__ import annotations

import uuid

import numpy as np
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

TRAINER_MODE = "vrsflow_sync"  # its name in verl's trainer registry
UID_NAMESPACE = uuid.UUID("5d1c1f4e-0c8a-4a52-9a0e-62a1d1b2c3f4")  # vrsflow's; any fixed UUID would do


def group_uid(seed: int, step: int, position: int, sample_id: str) -> str:
    """The uid of one prompt group: uuid5 of (seed, step, position in the fetched batch, sample id)."""
    return str(uuid.uuid5(UID_NAMESPACE, f"{int(seed)}/{int(step)}/{int(position)}/{sample_id}"))


@register_trainer(TRAINER_MODE)
class DeterministicUidTrainer(PPOTrainerSync):
    """verl's `sync` trainer whose prompt groups have deterministic uids (`group_uid`)."""

    def __init__(self, config):
        # verl's base trainer branches on the mode's name ("sync" → the synchronous replay buffer and code paths)
        config.trainer.v1.trainer_mode = "sync"
        super().__init__(config)

    def _fetch_one_gen_batch(self):
        # verl 0.9.1's own body, with group_uid in place of uuid.uuid4()
        try:
            if self.train_dataloader_it is None:
                self.train_dataloader_it = iter(self.train_dataloader)
            batch_dict = next(self.train_dataloader_it)
        except StopIteration:
            self.train_dataloader_it = iter(self.train_dataloader)
            batch_dict = next(self.train_dataloader_it)
        seed = self.config.actor_rollout_ref.rollout.seed
        extra = batch_dict.get("extra_info", [None] * len(batch_dict["raw_prompt"]))
        batch_dict["uid"] = np.array(
            [group_uid(seed, self.global_steps, i, (info or {}).get("sample_id", "")) for i, info in enumerate(extra)],
            dtype=object)
        return tu.get_tensordict(batch_dict)
