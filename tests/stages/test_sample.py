"""Stratified pools: exact sizes, proportions within one item, seeded, disjoint, no duplicates."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.core.params import IngestParams, SampleParams, SynthParams, SynthScale
from stages.core.runner import RunnerParams
from stages.ingest import ingest
from stages.sample import sample_pools
from stages.sample.stratify import allocate, draw, largest_remainder

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


def test_largest_remainder_literal() -> None:
    assert largest_remainder(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    assert largest_remainder(7, {"a": 5, "b": 2}) == {"a": 5, "b": 2}


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 30))
def test_draw_is_seeded_unique_and_order_independent(seed: int, n: int) -> None:
    ids = [f"v#{i}" for i in range(40)]
    strata = ["a" if i % 3 else "b" for i in range(40)]
    counts = {"a": min(n, 26), "b": min(n // 2, 14)}
    chosen = draw(ids, strata, counts, seed, "grpo")
    assert len(chosen) == len(set(chosen)) == counts["a"] + counts["b"]
    reversed_choice = draw(ids[::-1], strata[::-1], counts, seed, "grpo")
    assert sorted(chosen) == sorted(reversed_choice)


def test_different_seeds_give_different_draws() -> None:
    ids = [f"v#{i}" for i in range(100)]
    draws = {tuple(draw(ids, ["s"] * 100, {"s": 10}, seed, "sft")) for seed in range(5)}
    assert len(draws) == 5


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stages.synth import generate_synthetic

    base = tmp_path_factory.mktemp("sample")
    scale = SynthScale(n_videos_train=10, n_videos_valid=3, min_frames=6, max_frames=8, height=48, width=64)
    generate_synthetic(SynthParams(seed=1, default=scale), base / "raw")
    ingest(IngestParams(check_jpeg="header"), base / "raw", base / "index", RunnerParams(kind="serial"))
    return base / "index"


def test_pools_exact_disjoint_and_proportional(index_dir: Path, tmp_path: Path) -> None:
    params = SampleParams(sft_first_k=3, grpo_size=20)
    report = sample_pools(params, 7, index_dir, tmp_path)
    sft, grpo, ev = (pd.read_parquet(tmp_path / f"{p}.parquet") for p in ("sft", "grpo", "eval"))
    expressions = pd.read_parquet(index_dir / "expressions.parquet")
    assert len(grpo) == 20 and report.metrics["grpo.total"] == 20
    assert not set(sft["expression_id"]) & set(grpo["expression_id"])
    assert set(ev["split"]) == {"valid"} and len(ev) == (expressions["split"] == "valid").sum()
    assert "no_target" not in set(sft["type"]) | set(grpo["type"]) and "no_target" in set(ev["type"])
    first3 = expressions[(expressions["split"] == "train") & (expressions["type"] != "no_target")]
    first3 = first3[first3.groupby("video").cumcount() < 3]
    assert set(sft["expression_id"]) == set(first3["expression_id"])  # sft_size 0: the whole first-k set
    dist = pd.read_parquet(tmp_path / "distribution.parquet")
    assert set(dist["group"]) == {"source:train", "source:valid", "sft", "grpo", "eval"}
    assert (tmp_path / "distribution.png").stat().st_size > 1000
    again = tmp_path / "again"
    sample_pools(params, 7, index_dir, again)
    assert (again / "grpo.parquet").read_bytes() == (tmp_path / "grpo.parquet").read_bytes()
    other = tmp_path / "other"
    sample_pools(params, 8, index_dir, other)
    assert set(pd.read_parquet(other / "grpo.parquet")["expression_id"]) != set(grpo["expression_id"])


def test_motion_strata(index_dir: Path, tmp_path: Path) -> None:
    sample_pools(SampleParams(sft_first_k=3, grpo_size=10, motion_strata=True, motion_threshold=0.2), 0,
                 index_dir, tmp_path)
    grpo = pd.read_parquet(tmp_path / "grpo.parquet")
    assert grpo["stratum"].str.endswith(("/motion", "/static")).all()
    assert ((grpo["motion"] >= 0.2) == grpo["stratum"].str.endswith("/motion")).all()
