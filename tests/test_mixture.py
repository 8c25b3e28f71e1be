"""Several training sources in one pipeline (issue 26; docs/sampling.md "Training sources").

Unit level: a three-layout index (ReVOS, MeViS, Ref-YouTube-VOS, plus data.root's valid split) whose per-source
counts equal what the raw files hold, read here with plain `json` (never the readers under test); exact
per-source shares in the sample; one named line for a missing or malformed source.

End to end: the ci profile is a three-source mixture, so tests/test_pipeline.py's `vrsflow repro` runs every
stage on it, with the per-source counts of the index, the pools, the keyframes, the shards, SFT and GRPO
asserted from the raw meta files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from stages.core.params import DataParams, SourceParams
from stages.params.ingest import IngestParams
from stages.params.sample import SampleParams
from stages.params.synth import SynthParams, SynthScale
from tests.pipeline_repo import profile_overrides

SHARES = {"revos": 2.0, "mevis": 1.0, "refytvos": 1.0}


def _scale(project_root: Path) -> SynthScale:
    ci = profile_overrides(project_root, "ci")
    return SynthScale(**{k.rsplit(".", 1)[1]: v for k, v in ci.items() if k.startswith("synth.default.")})


def _write_sources(base: Path, scale: SynthScale) -> None:
    """The MeViS- and Ref-YouTube-VOS-layout sources: synthetic roots in those published layouts."""
    from stages.synth import generate_synthetic

    generate_synthetic(SynthParams(seed=11, source="MV", layout="mevis", default=scale), base / "mevis")
    generate_synthetic(SynthParams(seed=12, source="YT", layout="refytvos", default=scale), base / "refytvos")


def _sources(base: Path, revos_root: Path) -> list[dict]:
    return [{"name": "revos", "layout": "revos", "root": str(revos_root), "split": "train", "share": SHARES["revos"]},
            {"name": "mevis", "layout": "mevis", "root": str(base / "mevis"), "split": "train",
             "share": SHARES["mevis"]},
            {"name": "refytvos", "layout": "refytvos", "root": str(base / "refytvos"), "split": "train",
             "share": SHARES["refytvos"]}]


def raw_expressions(layout: str, root: Path, split: str) -> dict[str, list[tuple[str, int]]]:
    """Oracle: video → [(exp_id, number of targets)] in published order, straight from the raw meta file."""
    path = {"revos": root / f"meta_expressions_{split}_.json", "mevis": root / split / "meta_expressions.json",
            "refytvos": root / "meta_expressions" / split / "meta_expressions.json"}[layout]
    videos = json.loads(path.read_text())["videos"]
    out = {}
    for video, entry in videos.items():
        exps = sorted(entry["expressions"].items(), key=lambda kv: int(kv[0]))
        # refytvos names one object per expression (a string id); the others list their anno_ids
        out[video] = [(k, 1 if layout == "refytvos" else len(e["anno_id"])) for k, e in exps]
    return out


def expected_index(sources: list[dict], data_root: Path) -> dict[str, tuple[int, int]]:
    """Oracle: source → (videos, expressions) of the merged index."""
    out = {"root": raw_expressions("revos", data_root, "valid")}
    for s in sources:
        out[s["name"]] = raw_expressions(s["layout"], Path(s["root"]), s["split"])
    return {name: (len(videos), sum(len(e) for e in videos.values())) for name, videos in out.items()}


def expected_first_k(sources: list[dict], k: int) -> dict[str, int]:
    """Oracle: SFT pool per source = the first k expressions with a target of every training video."""
    return {s["name"]: sum(min(k, sum(1 for _, n in exps if n > 0))
                           for exps in raw_expressions(s["layout"], Path(s["root"]), s["split"]).values())
            for s in sources}


def source_of(video: str, names: list[str]) -> str:
    head = video.split("/", 1)[0]
    return head if head in names else "root"


# -- unit level -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory, project_root: Path) -> tuple[Path, list[dict], DataParams]:
    from stages.synth import generate_synthetic

    base = tmp_path_factory.mktemp("mixture")
    scale = _scale(project_root)
    generate_synthetic(SynthParams(seed=10, default=scale), base / "synth")
    _write_sources(base, scale)
    sources = _sources(base, base / "synth")
    data = DataParams(root=str(base / "synth"), index_dir=str(base / "index"), frames_dir=str(base / "frames"),
                      sources=tuple(SourceParams(**s) for s in sources))
    from stages.ingest.sources import ingest_data

    ingest_data(IngestParams(), data)
    return base, sources, data


def test_index_counts_per_source_equal_the_raw_files(mixture: tuple[Path, list[dict], DataParams]) -> None:
    from stages.core import revos
    from stages.core.frames_root import frames_root

    base, sources, data = mixture
    videos = pd.read_parquet(base / "index/videos.parquet")
    expressions = pd.read_parquet(base / "index/expressions.parquet")
    got = {name: (int((videos["source"] == name).sum()), int((expressions["source"] == name).sum()))
           for name in ["root", *SHARES]}
    assert got == expected_index(sources, base / "synth")
    assert set(videos.loc[videos["source"] == "root", "split"]) == {"valid"}
    assert set(videos.loc[videos["source"] != "root", "split"]) == {"train"}
    # source-qualified keys and ids; anno_ids unique over the sources; types explicit per layout
    for name in SHARES:
        assert videos.loc[videos["source"] == name, "video"].str.startswith(f"{name}/").all()
    annos = [a for ids in expressions["anno_ids"] for a in ids]
    assert len(set(expressions["expression_id"])) == len(expressions)
    tracks = pd.read_parquet(base / "index/tracks.parquet")
    assert set(annos) == set(tracks["anno_id"]) and tracks.groupby("anno_id")["video"].nunique().max() == 1
    assert dict(expressions.groupby("source")["type_source"].first()) == {
        "root": "annotation", "revos": "annotation", "mevis": "layout", "refytvos": "layout"}
    assert set(expressions.loc[expressions["type_source"] == "layout", "type"]) == {"referring"}
    # every video's frames open through the links
    root = frames_root(data)
    assert all(revos.frame_path(root, v.video, f).is_file() for v in videos.itertuples() for f in v.frames)
    lineage = json.loads((base / "index/lineage.json").read_text())
    assert {f"source:{n}" for n in ["root", *SHARES]} <= set(lineage["inputs"])
    assert {s["source"]: s["layout"] for s in lineage["extra"]["sources"]} == {
        "root": "revos", "revos": "revos", "mevis": "mevis", "refytvos": "refytvos"}


def test_train_readers_match_the_published_layout_definition(mixture: tuple[Path, list[dict], DataParams]) -> None:
    """Oracle from the layouts as published (MeViS README: `mask_dict.json` RLE per anno_id and frame, target =
    union of anno_ids; Ref-YouTube-VOS: palette PNG per frame, pixel value = obj_id), read here with json, PIL and
    pycocotools only: every mask of every indexed training expression equals it."""
    import numpy as np
    from PIL import Image
    from pycocotools import mask as mask_utils

    from stages.core.mask_table import read_masks
    from stages.ingest.sources import ANNO_STRIDE

    base, sources, _ = mixture
    expressions = pd.read_parquet(base / "index/expressions.parquet").set_index("expression_id")
    videos = pd.read_parquet(base / "index/videos.parquet").set_index("video")
    stored = read_masks(base / "index/masks.parquet", {a for ids in expressions["anno_ids"] for a in ids})
    position = {s["name"]: i for i, s in enumerate(sources, start=1)}

    def decode(rle: dict | None, shape: tuple[int, int]) -> np.ndarray:
        if rle is None:
            return np.zeros(shape, bool)
        return mask_utils.decode({"size": rle["size"], "counts": rle["counts"].encode()}).astype(bool)

    mevis = base / "mevis/train"
    meta = json.loads((mevis / "meta_expressions.json").read_text())["videos"]
    mask_dict = json.loads((mevis / "mask_dict.json").read_text())
    checked = 0
    for video, entry in meta.items():
        assert list(videos.loc[f"mevis/{video}", "frames"]) == sorted(entry["frames"])
        for exp_id, e in entry["expressions"].items():
            row = expressions.loc[f"mevis/{video}#{exp_id}"]
            assert row["text"] == e["exp"] and row["type"] == "referring"
            # one indexed anno_id per published one, in order (renumbered per source, offset by its position)
            assert len(row["anno_ids"]) == len(e["anno_id"])
            assert all(a // ANNO_STRIDE == position["mevis"] for a in row["anno_ids"])
            shape = (int(videos.loc[f"mevis/{video}", "height"]), int(videos.loc[f"mevis/{video}", "width"]))
            for ours, anno in zip(row["anno_ids"], e["anno_id"], strict=True):
                for mine, theirs in zip(stored[ours], mask_dict[str(anno)], strict=True):
                    assert np.array_equal(decode(mine, shape), decode(theirs, shape))
                    checked += 1
    ytvos = base / "refytvos"
    meta = json.loads((ytvos / "meta_expressions/train/meta_expressions.json").read_text())["videos"]
    for video, entry in meta.items():
        for exp_id, e in entry["expressions"].items():
            row = expressions.loc[f"refytvos/{video}#{exp_id}"]
            assert row["text"] == e["exp"] and row["n_instances"] == 1
            for t, frame in enumerate(entry["frames"]):
                with Image.open(ytvos / "train/Annotations" / video / f"{frame}.png") as img:
                    truth = np.asarray(img) == int(e["obj_id"])
                assert np.array_equal(decode(stored[row["anno_ids"][0]][t], truth.shape), truth)
                checked += 1
    assert checked > 100


def test_sample_draws_exact_per_source_shares(mixture: tuple[Path, list[dict], DataParams],
                                              tmp_path: Path) -> None:
    from stages.sample import sample_pools

    base, sources, _ = mixture
    report = sample_pools(SampleParams(sft_first_k=3, sft_size=0, grpo_size=8, eval_size=3), 0, base / "index",
                          tmp_path)
    sft = pd.read_parquet(tmp_path / "sft.parquet")
    grpo = pd.read_parquet(tmp_path / "grpo.parquet")
    names = list(SHARES)
    assert sft["video"].map(lambda v: source_of(v, names)).value_counts().to_dict() == expected_first_k(sources, 3)
    # 8 split 2:1:1 → 4, 2, 2 (each source has more than that left after SFT)
    assert grpo["video"].map(lambda v: source_of(v, names)).value_counts().to_dict() == {
        "revos": 4, "mevis": 2, "refytvos": 2}
    mixture_table = pd.read_parquet(tmp_path / "mixture.parquet")
    grpo_rows = mixture_table[mixture_table["pool"] == "grpo"].set_index("source")
    assert grpo_rows["count"].to_dict() == {"mevis": 2, "refytvos": 2, "revos": 4}
    assert grpo_rows["share"].to_dict() == {"mevis": 0.25, "refytvos": 0.25, "revos": 0.5}
    assert report.metrics["grpo.source.revos"] == 4 and (tmp_path / "mixture.png").stat().st_size > 0


def test_a_zero_share_source_stays_out_of_the_training_pools(mixture: tuple[Path, list[dict], DataParams],
                                                             tmp_path: Path) -> None:
    from schemas.index import SourcesSchema
    from stages.core.io import write_table
    from stages.sample import sample_pools

    base, _, _ = mixture
    index = tmp_path / "index"
    index.mkdir()
    for name in ("videos", "expressions", "tracks", "quarantine"):
        (index / f"{name}.parquet").write_bytes((base / "index" / f"{name}.parquet").read_bytes())
    table = pd.read_parquet(base / "index/sources.parquet")
    write_table(table.assign(share=table["source"].map({"mevis": 0.0}).fillna(table["share"])), SourcesSchema,
                index / "sources.parquet")
    sample_pools(SampleParams(sft_first_k=3, grpo_size=6, eval_size=0), 0, index, tmp_path / "sample")
    for pool in ("sft", "grpo"):
        videos = pd.read_parquet(tmp_path / "sample" / f"{pool}.parquet")["video"]
        assert not videos.str.startswith("mevis/").any() and len(videos)


def test_a_missing_or_malformed_source_is_one_named_line(mixture: tuple[Path, list[dict], DataParams],
                                                          tmp_path: Path) -> None:
    from stages.ingest.checks import IngestError
    from stages.ingest.sources import ingest_data

    base, sources, data = mixture
    missing = DataParams(root=data.root, index_dir=str(tmp_path / "i1"), sources=(
        *data.sources[:1], SourceParams(name="mevis", layout="mevis", root=str(tmp_path / "nowhere"))))
    with pytest.raises(IngestError) as err:
        ingest_data(IngestParams(), missing)
    assert str(err.value).count("\n") == 0 and str(err.value).startswith("data.sources[1] (mevis): root ")
    broken = tmp_path / "mevis"
    (broken / "train").mkdir(parents=True)
    (broken / "train" / "meta_expressions.json").write_text("{not json")
    malformed = DataParams(root=data.root, index_dir=str(tmp_path / "i2"), sources=(
        SourceParams(name="mv", layout="mevis", root=str(broken)),))
    with pytest.raises(IngestError) as err:
        ingest_data(IngestParams(), malformed)
    message = str(err.value)
    assert message.count("\n") == 0 and message.startswith("data.sources[0] (mv): ")
    assert "meta_expressions.json" in message and "malformed JSON" in message


def test_refdavis_train_split_reads_four_annotator_expressions_per_object(tmp_path: Path,
                                                                          project_root: Path) -> None:
    from stages.ingest.benchmarks import read_benchmark
    from stages.synth import generate_synthetic

    generate_synthetic(SynthParams(seed=3, source="DV", layout="refdavis", default=_scale(project_root)),
                       tmp_path / "davis")
    meta = json.loads((tmp_path / "davis/meta_expressions/train/meta_expressions.json").read_text())["videos"]
    bench = read_benchmark("refdavis", tmp_path / "davis", "train")
    assert set(bench.videos) == set(meta)
    for video, entry in meta.items():
        objects = {e["obj_id"] for e in entry["expressions"].values()}
        assert len(bench.videos[video].expressions) == 4 * len(objects) == len(entry["expressions"])
        assert bench.videos[video].frame_dir == tmp_path / "davis/train/JPEGImages" / video


def test_mevis_masks_are_streamed_not_loaded_whole(tmp_path: Path) -> None:
    """Memory bounded by one entry, not by mask_dict.json (MeViS train's is several GB): reading a 6 MB
    mask_dict (1000 anno_ids, 300 named) keeps a traced peak under a tenth of it; named anno_ids read back equal."""
    import tracemalloc

    from stages.ingest.benchmarks import read_benchmark

    split = tmp_path / "train"
    split.mkdir()
    frames = [f"{i:05d}" for i in range(6)]
    masks = {str(a): [{"size": [720, 1280], "counts": f"{a}:{t}:" + "x" * 1000} for t in range(len(frames))]
             for a in range(1, 1001)}
    meta = {f"v{v:03d}": {"frames": frames, "expressions": {
        str(i): {"exp": f"object {i}", "obj_id": [i], "anno_id": [v * 10 + i + 1]} for i in range(10)}}
        for v in range(30)}
    (split / "mask_dict.json").write_text(json.dumps(masks))
    (split / "meta_expressions.json").write_text(json.dumps({"videos": meta}))
    size = (split / "mask_dict.json").stat().st_size
    del masks
    tracemalloc.start()
    try:
        bench = read_benchmark("mevis", tmp_path, "train")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 5e6 and peak < size / 10, (size, peak)
    truth = json.loads((split / "mask_dict.json").read_text())
    assert len(bench.masks) == 300 and all(bench.masks[a] == truth[a] for a in ("1", "150", "300"))
    assert sum(len(v.expressions) for v in bench.videos.values()) == 300


# -- per-source results in training (the whole DAG: tests/test_pipeline.py) ---------------------------------------


def test_grpo_reward_per_source_is_the_mean_of_that_sources_rollouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's reward function logs, per step, each drawn source's mean score; the curve turns the log into
    `source.<name>.reward` columns (empty where a step drew none of it) and the summary averages them."""
    import math

    from stages.grpo import trl_engine
    from stages.grpo.curves import curve_from_trl, source_summary
    from stages.params.reward import RewardParams

    monkeypatch.setattr(trl_engine, "score_group",  # a score per completion: its length (the scorer is tested apart)
                        lambda texts, *a, **k: [{"score": float(len(t)), "format": 1.0} for t in texts])
    logged: dict[str, list[float]] = {}
    reward = trl_engine.GroupReward(RewardParams())
    texts = ["a", "abc", "abcdef", "ab", "abcd", "abcdefgh"]  # 3 prompts × 2 rollouts, prompt-major
    scores = reward(prompts=[None] * 6, completions=texts, ground_truth=["{}"] * 6,
                    sample_id=["s1", "s1", "s2", "s2", "s3", "s3"], source=["mevis"] * 2 + ["revos"] * 4,
                    log_metric=lambda name, value: logged.setdefault(name, []).append(value))
    assert scores == [1.0, 3.0, 6.0, 2.0, 4.0, 8.0]
    assert logged["reward_source/mevis"] == [2.0] and logged["reward_source/revos"] == [5.0]
    history = [{"step": 1, "reward": 4.0, "reward_source/mevis": 2.0, "reward_source/revos": 5.0},
               {"step": 2, "reward": 3.0, "reward_source/revos": 3.0}, {"train_runtime": 1.0}]
    rows = curve_from_trl(history)
    assert rows[0]["source.mevis.reward"] == 2.0 and "source.mevis.reward" not in rows[1]
    summary = source_summary(rows)
    assert summary == {"source.mevis.reward_mean": 2.0, "source.mevis.steps": 1,
                       "source.revos.reward_mean": 4.0, "source.revos.steps": 2}
    assert all(not math.isnan(v) for v in summary.values())


def test_sft_reports_per_source_samples_only_for_a_mixture() -> None:
    from types import SimpleNamespace

    from stages.sft import source_samples

    train = [SimpleNamespace(key=f"k{i}", meta={"source": s}) for i, s in enumerate(["revos"] * 40 + ["mevis"] * 3)]
    by_source = source_samples(train)
    assert {name: len(samples) for name, samples in by_source.items()} == {"mevis": 3, "revos": 32}
    assert by_source["revos"] == train[:32]  # the first samples, in key order
    assert source_samples(train[:40]) == {}  # one source: nothing extra to compute
