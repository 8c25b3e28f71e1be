"""The pre-training's samples, streamed: every optimizer step's batch generated for that step alone.

Sample i of step s is drawn from its own generator, `derive_seed(seed, "pretrain", "train", s, i)`, under the
curriculum phase that step falls in (`pretrain.curriculum`): which kinds of scene (synth frames with every kind of
expression at `synth_share`, else plain rectangles or synth shapes named by colour and kind: `scene`), how many
frames and objects, which colours may be asked (growing by `grow_every`) and the thought before the answer
(`think`). So a batch depends on (seed, step) only — never on what ran before it, how many loader processes
render, or where a resumed run started — and no scene is shown twice. The held-out check draws from the fixed
stream `derive_seed(CHECK_SEED, "pretrain", "check", i)` under the last phase with all its colours: the same samples for
every training seed (so that their figures compare), and apart from every training stream and from the synth
stage's evaluation videos (seeded `derive_seed(synth.seed, "synth", key)`). Synth frames are drawn at the synth
stage's own scale (`synth.<synth.size>`: frame size, clip length, objects, look), so the base learns the frames
the pipeline shows it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from stages.core.io import derive_seed
from stages.models.batches import PadCollator, assistant_labels
from stages.params.pretrain import PretrainParams, PretrainPhase
from stages.params.synth import SynthScale
from stages.pretrain.plain import plain_sample
from stages.pretrain.scenes import GroundingSample, shape_sample, synth_sample
from stages.tasks import get_task, user_content

CHECK_SEED = 0  # the held-out stream's base seed: one fixed set of samples whatever the training seeds


def phase_at(curriculum: tuple[PretrainPhase, ...], step: int) -> tuple[PretrainPhase, int]:
    """(the phase that optimizer step `step` (0-based) falls in, the step's index within it); past the end: the last."""
    start = 0
    for phase in curriculum:
        if step < start + phase.steps:
            return phase, step - start
        start += phase.steps
    return curriculum[-1], step - (start - curriculum[-1].steps)


def colours_at(phase: PretrainPhase, step_in_phase: int) -> tuple[str, ...]:
    """The colours a plain scene may ask for at a step of the phase: all, or the first few as they grow."""
    if phase.grow_every == 0:
        return phase.colours
    return phase.colours[:1 + step_in_phase // phase.grow_every]


def draw_sample(rng: np.random.Generator, name: str, phase: PretrainPhase, colours: tuple[str, ...], size: int,
                scale: SynthScale) -> GroundingSample:
    """One sample of the phase's mix: synth frames with probability `synth_share`, else the phase's scene (its id
    ends in /synth, /plain or /shapes)."""
    if rng.random() < phase.synth_share:
        return synth_sample(rng, f"{name}/synth", phase.frames, size, scale)
    if phase.scene == "shapes":
        return shape_sample(rng, f"{name}/shapes", phase.frames, size, scale, phase.objects, colours)
    return plain_sample(rng, f"{name}/plain", phase.frames, size, phase.objects, colours, phase.move)


def step_samples(params: PretrainParams, seed: int, step: int, size: int, scale: SynthScale) -> list[GroundingSample]:
    """The `batch_size` samples of optimizer step `step` (0-based) of training seed `seed`, synth frames at `scale`."""
    phase, within = phase_at(params.curriculum, step)
    colours = colours_at(phase, within)
    return [replace(draw_sample(np.random.default_rng(derive_seed(seed, "pretrain", "train", step, i)),
                                f"train/{seed}/{step}/{i}", phase, colours, size, scale), think=phase.think)
            for i in range(params.batch_size)]


def check_samples(params: PretrainParams, size: int, scale: SynthScale) -> list[GroundingSample]:
    """The held-out samples: `check_samples` of the last phase with all its colours, from the fixed check stream."""
    return _held_out(params, "check", params.check_samples, size, scale)


def select_samples(params: PretrainParams, size: int, scale: SynthScale) -> list[GroundingSample]:
    """The samples that choose a seed's kept step (`select_every_steps`): `select_samples` of the last phase with all
    its colours, from a fixed stream of their own (the reported check stays apart from what chose the weights)."""
    return _held_out(params, "select", params.select_samples, size, scale)


def screen_samples(params: PretrainParams, step: int, size: int, scale: SynthScale) -> list[GroundingSample]:
    """The samples a screen after optimizer step `step` (1-based: the steps trained) asks: `screen_samples` of the
    phase its last step was in, of the colours asked up to it, from a fixed stream of their own per screen step."""
    phase, within = phase_at(params.curriculum, step - 1)
    return _held_out(params, f"screen-{step}", params.screen_samples, size, scale, phase, colours_at(phase, within))


def _held_out(params: PretrainParams, stream: str, count: int, size: int, scale: SynthScale,
              phase: PretrainPhase | None = None, colours: tuple[str, ...] | None = None) -> list[GroundingSample]:
    """`count` samples of `phase` (default: the last) asking `colours` (default: all the phase's), stream `stream`."""
    phase = phase or params.curriculum[-1]
    return [replace(draw_sample(np.random.default_rng(derive_seed(CHECK_SEED, "pretrain", stream, i)), f"{stream}/{i}",
                                phase, colours or phase.colours, size, scale), think=phase.think)
            for i in range(count)]


def chat(sample: GroundingSample, with_answer: bool) -> list[dict]:
    """The evaluation's question about the sample's frames (veason task), with the answer when training."""
    question = get_task("veason").question(sample.expression, sample.timestamps)
    messages = [{"role": "user", "content": user_content(sample.timestamps, question)}]
    if with_answer:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": sample.response}]})
    return messages


def encode(processor, sample: GroundingSample) -> dict[str, torch.Tensor]:
    """A sample with its answer as the model's inputs, labels on the answer only."""
    text = processor.apply_chat_template(chat(sample, True), tokenize=False)
    item = dict(processor(text=[text], images=[sample.images], return_tensors="pt"))
    item["labels"] = assistant_labels(item["input_ids"], processor.tokenizer)
    return item


class StepBatches(torch.utils.data.Dataset):
    """Item s = step s's batch, rendered and encoded (loss on the answer only), split into `micro_batches` padded
    batches. A map over steps, so DataLoader workers render steps ahead in parallel and hand them back in order."""

    def __init__(self, params: PretrainParams, seed: int, size: int, scale: SynthScale, processor) -> None:
        self.params, self.seed, self.size, self.scale, self.processor = params, seed, size, scale, processor
        self.collate = PadCollator(processor.tokenizer.pad_token_id)

    def __len__(self) -> int:
        return self.params.steps

    def __getitem__(self, step: int) -> list[dict[str, torch.Tensor]]:
        encoded = [encode(self.processor, sample) for sample in step_samples(self.params, self.seed, step, self.size,
                                                                                self.scale)]
        per = len(encoded) // self.params.micro_batches
        return [self.collate(encoded[k:k + per]) for k in range(0, len(encoded), per)]
