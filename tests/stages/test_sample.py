"""Stratified pools: exact sizes, proportions within one item, seeded, disjoint, no duplicates.

The index tables are built here directly (validated by the ingest schemas), so these tests do not
depend on the synth or ingest stages.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.index import ExpressionsSchema, TracksSchema, VideosSchema
from schemas.sample import SampleSchema
from stages.core.ids import expression_id, sample_id
from stages.core.io import write_table
from stages.core.mask_table import FILE as MASKS_FILE
from stages.core.mask_table import MaskTableWriter
from stages.params.sample import SampleParams
from stages.sample import sample_pools
from stages.sample.stratify import allocate, draw, largest_remainder
from tests.revos_factory import VideoSpec, encode, rect_mask

TYPES = {0: "referring", 1: "reasoning", 2: "no_target"}


def write_index(index_dir: Path, specs: list[VideoSpec]) -> Path:
    """ingest's tables for `specs` (boxes → exact rectangle areas; masks.parquet: the RLEs that
    tests/revos_factory.write_root writes to mask_dict.json), validated by their schemas."""
    videos, expressions, tracks = [], [], []
    masks = MaskTableWriter(index_dir / MASKS_FILE)
    for spec in specs:
        names = spec.frame_names()
        videos.append({"video": spec.key, "vid_id": spec.key.rsplit("/", 1)[-1], "split": spec.split,
                       "height": spec.height, "width": spec.width, "n_frames": len(names), "frames": names})
        for i, e in enumerate(spec.expressions):
            expressions.append({
                "expression_id": expression_id(spec.key, str(i)), "video": spec.key, "exp_id": str(i),
                "split": spec.split, "text": e["exp"], "type": TYPES[e["type_id"]], "type_id": e["type_id"],
                "obj_ids": e["obj_id"], "anno_ids": e["anno_id"], "n_instances": len(e["anno_id"])})
        for anno, boxes in spec.objects.items():
            for t, box in enumerate(boxes):
                x1, y1, x2, y2 = box if box is not None else (np.nan,) * 4
                area = 0 if box is None else (x2 - x1) * (y2 - y1)
                tracks.append({"anno_id": anno, "video": spec.key, "frame_idx": t, "frame": names[t], "area": area,
                               "x1": x1, "y1": y1, "x2": x2, "y2": y2})
            masks.add(anno, [encode(rect_mask(b, spec.height, spec.width)) for b in boxes], spec.height, spec.width)
    masks.close()
    write_table(pd.DataFrame(videos), VideosSchema, index_dir / "videos.parquet")
    write_table(pd.DataFrame(expressions), ExpressionsSchema, index_dir / "expressions.parquet")
    write_table(pd.DataFrame(tracks), TracksSchema, index_dir / "tracks.parquet")
    return index_dir


def mixed_video(key: str, split: str, video_no: int, n_frames: int = 6) -> VideoSpec:
    """A video with 6–12 expressions over every stratum; object o moves `o % 3 * 3` px per frame (40×30 frame)."""
    objects: dict[int, list] = {}
    for o in range(4):
        speed = (o % 3) * 3
        objects[1000 * video_no + o] = [(1 + speed * t, 1, 5 + speed * t, 5) for t in range(n_frames)]
    annos = list(objects)
    pattern = [(0, 1), (0, 1), (1, 1), (0, 2), (1, 1), (2, 0), (1, 2), (0, 1), (1, 1), (1, 3), (0, 1), (1, 1)]
    expressions = []
    for i, (type_id, n) in enumerate(pattern[: 6 + video_no % 7]):
        ids = [annos[(i + j) % 4] for j in range(n)]
        expressions.append({"exp": f"expression {i}", "obj_id": list(range(n)), "anno_id": ids, "type_id": type_id})
    return VideoSpec(key, split=split, height=30, width=40, n_frames=n_frames, objects=objects,
                     expressions=expressions)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    specs = [mixed_video(f"S/train/v{i}", "train", i) for i in range(12)]
    specs += [mixed_video(f"S/valid/v{i}", "valid", 20 + i) for i in range(3)]
    return write_index(tmp_path_factory.mktemp("index"), specs)


def read_pools(out: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return tuple(pd.read_parquet(out / f"{p}.parquet") for p in ("sft", "grpo", "eval"))  # type: ignore[return-value]


# --- the pure rules -------------------------------------------------------------------------------------

strata_sizes = st.dictionaries(st.sampled_from(["ref/single", "ref/multi", "rea/single", "rea/multi"]),
                               st.integers(0, 60), min_size=1)


@settings(max_examples=200, deadline=None)
@given(strata_sizes, st.integers(0, 250))
def test_quotas_are_exact_and_within_one_of_share(source: dict[str, int], size: int) -> None:
    total = sum(source.values())
    counts = allocate(size, source, source)
    assert sum(counts.values()) == min(size, total)
    if total and size <= total:
        for stratum, n in source.items():
            assert abs(counts[stratum] - size * n / total) < 1 + 1e-9
            assert counts[stratum] <= n


@settings(max_examples=200, deadline=None)
@given(strata_sizes, st.data(), st.integers(0, 250))
def test_top_up_fills_from_spare_strata(source: dict[str, int], data: st.DataObject, size: int) -> None:
    available = {s: data.draw(st.integers(0, n)) for s, n in source.items()}
    counts = allocate(size, source, available)
    assert sum(counts.values()) == min(size, sum(available.values()))
    assert all(0 <= counts[s] <= available[s] for s in available)
    # a stratum below its proportional quota is never left with spare items while others are topped up
    quota = largest_remainder(min(size, sum(available.values())), source)
    if any(counts[s] < quota[s] for s in source):
        short = [s for s in source if counts[s] < quota[s]]
        assert all(counts[s] == available[s] for s in short)


@pytest.mark.parametrize(("total", "weights", "expected"), [
    (10, {"a": 1, "b": 1, "c": 1}, {"a": 4, "b": 3, "c": 3}),
    (7, {"a": 5, "b": 2}, {"a": 5, "b": 2}),
    (5, {"a": 58, "b": 30, "c": 12}, {"a": 3, "b": 1, "c": 1}),  # 2.9, 1.5, 0.6 → remainders .9, .6, .5
    (0, {"a": 3}, {"a": 0}),
    (4, {"a": 0, "b": 0}, {"a": 0, "b": 0}),
])
def test_largest_remainder_literals(total: int, weights: dict[str, int], expected: dict[str, int]) -> None:
    assert largest_remainder(total, weights) == expected


def test_allocate_top_up_literal() -> None:
    # quota of 10 over 50/30/20 is 5/3/2; "b" has 1 left → its 2 missing go to a and c by largest remainder
    assert allocate(10, {"a": 50, "b": 30, "c": 20}, {"a": 50, "b": 1, "c": 20}) == {"a": 6, "b": 1, "c": 3}


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 30))
def test_draw_is_seeded_unique_and_order_independent(seed: int, n: int) -> None:
    ids = [f"v#{i}" for i in range(40)]
    strata = ["a" if i % 3 else "b" for i in range(40)]
    counts = {"a": min(n, 26), "b": min(n // 2, 14)}
    chosen = draw(ids, strata, counts, seed, "grpo")
    assert len(chosen) == len(set(chosen)) == counts["a"] + counts["b"]
    assert sum(strata[ids.index(c)] == "a" for c in chosen) == counts["a"]
    reversed_choice = draw(ids[::-1], strata[::-1], counts, seed, "grpo")
    assert sorted(chosen) == sorted(reversed_choice)
    assert draw(ids, strata, counts, seed, "grpo") == chosen


def test_different_seeds_give_different_draws() -> None:
    ids = [f"v#{i}" for i in range(100)]
    draws = {tuple(draw(ids, ["s"] * 100, {"s": 10}, seed, "sft")) for seed in range(5)}
    assert len(draws) == 5


# --- the stage ------------------------------------------------------------------------------------------

def test_pools_exact_disjoint_and_proportional(index_dir: Path, tmp_path: Path) -> None:
    params = SampleParams(sft_first_k=4, sft_size=20, grpo_size=25, eval_size=0)
    report = sample_pools(params, 7, index_dir, tmp_path)
    sft, grpo, ev = read_pools(tmp_path)
    expressions = pd.read_parquet(index_dir / "expressions.parquet")
    assert (len(sft), len(grpo)) == (20, 25)
    assert report.metrics["sft.total"] == 20 and report.metrics["grpo.total"] == 25
    for pool in (sft, grpo, ev):
        SampleSchema.validate(pool)
        assert pool["expression_id"].is_unique and pool["sample_id"].is_unique
        assert (pool["sample_id"] == pool["expression_id"].map(sample_id)).all()
    assert not set(sft["expression_id"]) & set(grpo["expression_id"])
    assert set(ev["split"]) == {"valid"} and len(ev) == (expressions["split"] == "valid").sum()
    assert "no_target" not in set(sft["type"]) | set(grpo["type"]) and "no_target" in set(ev["type"])
    # SFT comes from the first k usable expressions of each video (exp_id order, numerically)
    usable = expressions[(expressions["split"] == "train") & (expressions["type"] != "no_target")].copy()
    usable = usable.sort_values(["video", "exp_id"], key=lambda c: c.map(lambda v: int(v) if v.isdigit() else v))
    first_k = set(usable[usable.groupby("video").cumcount() < 4]["expression_id"])
    assert set(sft["expression_id"]) <= first_k
    # proportions: within one sample of size × source share, per stratum (no stratum runs short here)
    source = usable["type"] + "/" + np.where(usable["n_instances"] == 1, "single", "multi")
    shares = source.value_counts() / len(source)
    for stratum, share in shares.items():
        assert abs((grpo["stratum"] == stratum).sum() - 25 * share) < 1
    # distribution table and metrics agree with the pools
    dist = pd.read_parquet(tmp_path / "distribution.parquet")
    assert set(dist["group"]) == {"source:train", "source:valid", "sft", "grpo", "eval"}
    for row in dist.itertuples():
        assert report.metrics[f"{row.group}.{row.stratum}"] == row.count
    grpo_counts = dist[dist["group"] == "grpo"].set_index("stratum")["count"]
    assert grpo_counts.to_dict() == grpo["stratum"].value_counts().to_dict()
    assert (tmp_path / "distribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lineage = json.loads((tmp_path / "lineage.json").read_text())
    assert lineage["stage"] == "sample" and lineage["counts"] == {"eval": len(ev), "grpo": 25, "sft": 20}


def test_same_seed_same_bytes_other_seed_other_draw(index_dir: Path, tmp_path: Path) -> None:
    params = SampleParams(sft_first_k=4, sft_size=20, grpo_size=25)
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        sample_pools(params, seed, index_dir, tmp_path / name)
    for pool in ("sft", "grpo", "eval", "distribution"):
        assert (tmp_path / "a" / f"{pool}.parquet").read_bytes() == (tmp_path / "b" / f"{pool}.parquet").read_bytes()
    assert (tmp_path / "a" / "distribution.png").read_bytes() == (tmp_path / "b" / "distribution.png").read_bytes()
    a_grpo, c_grpo = (set(pd.read_parquet(tmp_path / n / "grpo.parquet")["expression_id"]) for n in "ac")
    assert a_grpo != c_grpo


def test_top_up_keeps_exact_size_when_a_stratum_runs_short(index_dir: Path, tmp_path: Path) -> None:
    # SFT takes the first 6 of every video, leaving GRPO's candidates skewed: some stratum cannot meet
    # its source-proportional quota, the others top it up, and the size is still exact
    expressions = pd.read_parquet(index_dir / "expressions.parquet")
    train = expressions[(expressions["split"] == "train") & (expressions["type"] != "no_target")]
    sample_pools(SampleParams(sft_first_k=6, grpo_size=1), 1, index_dir, tmp_path / "probe")
    size = len(train) - len(pd.read_parquet(tmp_path / "probe" / "sft.parquet")) - 2
    report = sample_pools(SampleParams(sft_first_k=6, grpo_size=size), 1, index_dir, tmp_path)
    sft, grpo, _ = read_pools(tmp_path)
    assert len(grpo) == size and "grpo.shortfall" not in report.metrics
    assert not set(sft["expression_id"]) & set(grpo["expression_id"])
    dist = pd.read_parquet(tmp_path / "distribution.parquet").pivot_table(
        index="stratum", columns="group", values="count", fill_value=0)
    quota = largest_remainder(size, dist["source:train"][dist["source:train"] > 0].to_dict())
    assert any(dist.loc[s, "grpo"] < q for s, q in quota.items())
    # asking for more than exists: every remaining candidate, and the shortfall is reported
    report = sample_pools(SampleParams(sft_first_k=6, grpo_size=500), 1, index_dir, tmp_path / "big")
    assert report.metrics["grpo.total"] == len(train) - len(sft)
    assert report.metrics["grpo.shortfall"] == 500 - (len(train) - len(sft))


def test_overlapping_pools_and_no_target_params(index_dir: Path, tmp_path: Path) -> None:
    params = SampleParams(sft_first_k=3, grpo_size=30, disjoint=False, include_no_target_train=True,
                          include_no_target_eval=False, eval_size=10)
    sample_pools(params, 0, index_dir, tmp_path)
    sft, grpo, ev = read_pools(tmp_path)
    assert len(grpo) == 30 and len(ev) == 10 and grpo["expression_id"].is_unique
    assert "no_target" in set(sft["type"]) | set(grpo["type"]) and "no_target" not in set(ev["type"])
    assert "no_target/none" in set(grpo["stratum"])


def test_motion_strata(index_dir: Path, tmp_path: Path) -> None:
    # objects travel 0, 3×5 = 15 or 6×5 = 30 px in a 40×30 frame (diagonal 50): motion 0, 0.3, 0.6
    sample_pools(SampleParams(sft_first_k=3, grpo_size=20, motion_strata=True, motion_threshold=0.45), 0,
                 index_dir, tmp_path)
    sft, grpo, _ = read_pools(tmp_path)
    assert set(np.round(pd.concat([sft, grpo])["motion"], 6)) <= {0.0, 0.3, 0.6}
    assert grpo["stratum"].str.endswith(("/motion", "/static")).all()
    assert ((grpo["motion"] >= 0.45) == grpo["stratum"].str.endswith("/motion")).all()
    assert {"motion", "static"} <= {s.rsplit("/", 1)[1] for s in grpo["stratum"]}


def test_difficulty_strata_from_a_sample_id_table(index_dir: Path, tmp_path: Path) -> None:
    expressions = pd.read_parquet(index_dir / "expressions.parquet")
    scored = expressions[expressions["split"] == "train"].iloc[::2]
    levels = pd.DataFrame({"sample_id": scored["expression_id"].map(sample_id),
                           "level": ["easy", "medium", "hard"] * (len(scored) // 3) + ["easy"] * (len(scored) % 3)})
    levels.to_parquet(tmp_path / "scores.parquet")
    sample_pools(SampleParams(sft_first_k=3, grpo_size=20, difficulty_table=str(tmp_path / "scores.parquet")), 0,
                 index_dir, tmp_path / "out")
    _, grpo, _ = read_pools(tmp_path / "out")
    assert len(grpo) == 20
    by_sample = dict(zip(levels["sample_id"], levels["level"], strict=True))
    for row in grpo.itertuples():
        assert row.stratum.rsplit("/", 1)[1] == by_sample.get(row.sample_id, "unscored")
        assert (None if pd.isna(row.level) else row.level) == by_sample.get(row.sample_id)


@pytest.mark.parametrize(("params", "message"), [
    (SampleParams(grpo_size=-1), "grpo_size must be ≥ 0"),
    (SampleParams(motion_threshold=0.0), "motion_threshold must be > 0"),
    (SampleParams(difficulty_table="/nonexistent/scores.parquet"), "does not exist"),
])
def test_bad_params_are_named(index_dir: Path, tmp_path: Path, params: SampleParams, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sample_pools(params, 0, index_dir, tmp_path)


def test_tasks_per_pool(index_dir: Path, tmp_path: Path) -> None:
    # RCoT-Seg: every SFT sample trains all four tasks; GRPO samples get one task each, AKS : KTG = 4 : 6
    params = SampleParams(sft_first_k=3, grpo_size=20, sft_tasks=("rcot_vdg", "rcot_kfg", "rcot_aks", "rcot_ktg"),
                          grpo_tasks=("rcot_aks", "rcot_ktg"), grpo_task_weights=(4.0, 6.0))
    sample_pools(params, 0, index_dir, tmp_path)
    sft, grpo, ev = read_pools(tmp_path)
    assert all(list(t) == ["rcot_vdg", "rcot_kfg", "rcot_aks", "rcot_ktg"] for t in sft["tasks"])
    assert grpo["tasks"].map(tuple).value_counts().to_dict() == {("rcot_ktg",): 12, ("rcot_aks",): 8}
    assert set(ev["tasks"].map(tuple)) <= {("rcot_aks",), ("rcot_ktg",)}
    # no-target expressions cannot be asked by RCoT-Seg's tasks: they leave the training pools
    sample_pools(SampleParams(sft_first_k=3, grpo_size=40, include_no_target_train=True,
                              grpo_tasks=("rcot_ktg",)), 0, index_dir, tmp_path / "nt")
    _, grpo_nt, _ = read_pools(tmp_path / "nt")
    assert "no_target" not in set(grpo_nt["type"])
    with pytest.raises(ValueError, match="sample.grpo_tasks: unknown task 'rcot_akz'"):
        sample_pools(SampleParams(grpo_tasks=("rcot_akz",)), 0, index_dir, tmp_path / "bad")


def test_single_multi_ratio(index_dir: Path, tmp_path: Path) -> None:
    # RCoT-Seg trains single : multi = 3 : 1 whatever the source's mix
    sample_pools(SampleParams(sft_first_k=1, grpo_size=20, single_multi_ratio=3.0), 0, index_dir, tmp_path)
    _, grpo, _ = read_pools(tmp_path)
    instances = grpo["stratum"].str.split("/").str[1].value_counts().to_dict()
    assert (instances["single"], instances["multi"]) == (15, 5)
    from stages.sample import instance_weights

    weights = instance_weights({"referring/single": 10, "reasoning/single": 30, "referring/multi": 40}, 3.0)
    assert weights == {"referring/single": 15.0, "reasoning/single": 45.0, "referring/multi": 20.0}
