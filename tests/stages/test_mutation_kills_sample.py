"""Stratified-selection rules pinned for the mutation run (scripts/mutation.sh sample, docs/testing.md):
Hamilton's ties by key, the even share for strata missing from the source, and the draw's order rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from stages.params.sample import SampleParams
from stages.sample.stratify import allocate, draw, largest_remainder


@pytest.mark.parametrize(("total", "weights", "expected"), [
    (1, {"b": 1, "a": 1}, {"a": 1, "b": 0}),  # equal remainders: the first key
    (3, {"x": 1, "y": 1, "z": 2}, {"x": 1, "y": 1, "z": 1}),  # .75, .75, 1.5: floors 0, 0, 1; two left
    (4, {"a": 1, "b": 8, "c": 1}, {"a": 1, "b": 3, "c": 0}),  # .4, 3.2, .4: the one left goes to "a" (tie by key)
    (7, {"a": 5, "b": 2}, {"a": 5, "b": 2}),
    (0, {"a": 1}, {"a": 0}), (-2, {"a": 1}, {"a": 0}), (5, {"a": 0, "b": 0}, {"a": 0, "b": 0}),
])
def test_largest_remainder_literals(total, weights, expected):
    assert largest_remainder(total, weights) == expected


@pytest.mark.parametrize(("size", "source", "available", "expected"), [
    (4, {}, {"a": 3, "b": 3}, {"a": 2, "b": 2}),  # no source sizes: an even share
    (5, {"a": 1}, {"a": 3, "b": 3}, {"a": 3, "b": 2}),  # "a" runs out; "b" (absent from the source) tops up
    (10, {"a": 5, "b": 5}, {"a": 1, "b": 2}, {"a": 1, "b": 2}),  # fewer candidates than asked
    (6, {"a": 2, "b": 1}, {"a": 4, "b": 0, "c": 9}, {"a": 4, "b": 0, "c": 2}),
])
def test_allocate_literals(size, source, available, expected):
    assert allocate(size, source, available) == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from("st"), min_size=1, max_size=12), st.integers(0, 5), st.integers(0, 5),
       st.integers(0, 2**31), st.randoms())
def test_draw_is_seeded_order_free_and_exact(strata, n_s, n_t, seed, rnd):
    ids = [f"item{i}" for i in range(len(strata))]
    counts = {"s": n_s, "t": n_t}
    chosen = draw(ids, strata, counts, seed, "grpo")
    assert chosen == [i for i in ids if i in set(chosen)]  # input order
    for stratum, n in counts.items():
        members = [i for i, s in zip(ids, strata, strict=True) if s == stratum]
        assert len([i for i in chosen if i in members]) == min(n, len(members))
    order = list(range(len(ids)))
    rnd.shuffle(order)
    shuffled = draw([ids[k] for k in order], [strata[k] for k in order], counts, seed, "grpo")
    assert set(shuffled) == set(chosen)  # which items, not their order in the input, decide
    assert draw(ids, strata, {"s": n_s}, seed, "grpo") == [i for i in chosen if strata[ids.index(i)] == "s"]


# ---- the stage: sources, errors, levels, the tables and charts a person reads ---------------------------------

def _index(base, sources: dict[str, str] | None = None):
    """test_sample's index (12 training videos, 3 valid ones); with `sources` (video → source), a
    several-source index as ingest writes it: a `source` column and sources.parquet."""
    import pandas as pd

    from schemas.index import ExpressionsSchema, SourcesSchema, VideosSchema
    from stages.core.io import write_table
    from tests.stages.test_sample import mixed_video, write_index

    specs = [mixed_video(f"S/train/v{i}", "train", i) for i in range(12)]
    specs += [mixed_video(f"S/valid/v{i}", "valid", 20 + i) for i in range(3)]
    index = write_index(base, specs)
    if sources is not None:
        for name, schema in (("expressions", ExpressionsSchema), ("videos", VideosSchema)):
            table = pd.read_parquet(index / f"{name}.parquet")
            write_table(table.assign(source=table["video"].map(sources)), schema, index / f"{name}.parquet")
        rows = [{"source": s, "layout": "revos", "root": f"/data/{s}", "split": split, "published_split": split,
                 "share": share, "type_source": "annotation", "videos": 1, "expressions": 1, "quarantined": 0}
                for s, split, share in (("alpha", "train", 3.0), ("beta", "train", 1.0), ("gamma", "train", 0.0),
                                        ("root", "valid", 0.0), ("delta", "valid", 0.0))]
        write_table(pd.DataFrame(rows), SourcesSchema, index / "sources.parquet")
    return index


def _source_of(video: str) -> str:
    if video.startswith("S/valid/"):
        return "delta" if video.endswith("v2") else "root"  # a second evaluation source: v2's 7 expressions
    number = int(video.rsplit("v", 1)[1])
    return "alpha" if number < 6 else "beta" if number < 10 else "gamma"


@pytest.fixture(scope="module")
def plain_index(tmp_path_factory):
    return _index(tmp_path_factory.mktemp("plain_index"))


@pytest.fixture(scope="module")
def mixed_index(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixed_index")
    from tests.stages.test_sample import mixed_video

    videos = [mixed_video(f"S/train/v{i}", "train", i).key for i in range(12)]
    videos += [mixed_video(f"S/valid/v{i}", "valid", 20 + i).key for i in range(3)]
    return _index(base, {v: _source_of(v) for v in videos})


def test_several_sources_exact_quotas_mixture_table_and_metrics(mixed_index, tmp_path):
    import pandas as pd

    from stages.sample import sample_pools

    report = sample_pools(SampleParams(sft_first_k=2, sft_size=8, grpo_size=12), 0, mixed_index, tmp_path)
    pools = {p: pd.read_parquet(tmp_path / f"{p}.parquet") for p in ("sft", "grpo", "eval")}
    by_source = {p: t["video"].map(_source_of).value_counts().to_dict() for p, t in pools.items()}
    # shares 3 : 1 (gamma's 0 keeps it out): 8 → 6 + 2, 12 → 9 + 3
    assert by_source["sft"] == {"alpha": 6, "beta": 2} and by_source["grpo"] == {"alpha": 9, "beta": 3}
    n_eval = len(pools["eval"])
    assert by_source["eval"] == {"root": n_eval - 7, "delta": 7}
    mixture = pd.read_parquet(tmp_path / "mixture.parquet")
    assert mixture.to_dict("records") == [
        {"pool": "sft", "source": "alpha", "share": 0.75, "count": 6, "fraction": 0.75},
        {"pool": "sft", "source": "beta", "share": 0.25, "count": 2, "fraction": 0.25},
        {"pool": "grpo", "source": "alpha", "share": 0.75, "count": 9, "fraction": 0.75},
        {"pool": "grpo", "source": "beta", "share": 0.25, "count": 3, "fraction": 0.25},
        # evaluation asks for data.root only; another source that reached it is shown with share 0
        {"pool": "eval", "source": "delta", "share": 0.0, "count": 7, "fraction": 7 / n_eval},
        {"pool": "eval", "source": "root", "share": 1.0, "count": n_eval - 7, "fraction": (n_eval - 7) / n_eval}]
    assert {k: v for k, v in report.metrics.items() if ".source." in k} == {
        "sft.source.alpha": 6, "sft.source.beta": 2, "grpo.source.alpha": 9, "grpo.source.beta": 3,
        "eval.source.root": n_eval - 7, "eval.source.delta": 7}
    assert report.tables["training mixture (asked share vs achieved)"].equals(mixture)
    assert report.markdown.count("data:image/png;base64,") == 2
    assert "\n\n![training mixture](data:image/png;base64," in report.markdown
    assert (tmp_path / "mixture.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # size 0 = every candidate of the sources with a share
    sample_pools(SampleParams(sft_first_k=2, sft_size=0, grpo_size=0), 0, mixed_index, tmp_path / "all")
    sft_all = pd.read_parquet(tmp_path / "all" / "sft.parquet")["video"].map(_source_of).value_counts().to_dict()
    assert sft_all == {"alpha": 12, "beta": 8}  # the first 2 usable expressions of 6 and 4 videos
    # a pool of 1 at 3 : 1 goes to alpha; beta is asked for and gets none: its row says 0
    sample_pools(SampleParams(sft_first_k=2, sft_size=1, grpo_size=1), 0, mixed_index, tmp_path / "one")
    rows = pd.read_parquet(tmp_path / "one" / "mixture.parquet")
    assert rows[rows["pool"] == "sft"].to_dict("records") == [
        {"pool": "sft", "source": "alpha", "share": 0.75, "count": 1, "fraction": 1.0},
        {"pool": "sft", "source": "beta", "share": 0.25, "count": 0, "fraction": 0.0}]
    one = pd.read_parquet(tmp_path / "one" / "distribution.parquet")
    assert one[one["group"] == "sft"][["count", "fraction"]].values.tolist() == [[1, 1.0]]  # a pool of one: all of it


def test_each_source_is_stratified_by_its_own_proportions(mixed_index, tmp_path):
    import pandas as pd

    from stages.sample import sample_pools

    sample_pools(SampleParams(sft_first_k=1, grpo_size=36), 0, mixed_index, tmp_path)
    grpo = pd.read_parquet(tmp_path / "grpo.parquet")
    expressions = pd.read_parquet(mixed_index / "expressions.parquet")
    train = expressions[(expressions["split"] == "train") & (expressions["type"] != "no_target")]
    for source, quota in (("alpha", 27), ("beta", 9)):  # beta's 9 by its own mix differ from the others' mix
        own = train[train["video"].map(_source_of) == source]
        strata = own["type"] + "/" + own["n_instances"].map(lambda n: "single" if n == 1 else "multi")
        expected = largest_remainder(quota, strata.value_counts().to_dict())
        got = grpo[grpo["video"].map(_source_of) == source]["stratum"].value_counts().to_dict()
        assert got == {s: n for s, n in expected.items() if n}, source


@pytest.mark.parametrize(("field", "value", "message"), [
    ("sft_first_k", -1, "sample.sft_first_k must be ≥ 0 (0 = all), got -1"),
    ("sft_size", -2, "sample.sft_size must be ≥ 0 (0 = all), got -2"),
    ("grpo_size", -1, "sample.grpo_size must be ≥ 0 (0 = all), got -1"),
    ("eval_size", -3, "sample.eval_size must be ≥ 0 (0 = all), got -3"),
    ("motion_threshold", -0.5, "sample.motion_threshold must be > 0, got -0.5"),
])
def test_bad_params_are_one_exact_line(plain_index, tmp_path, field, value, message):
    from dataclasses import replace

    from stages.sample import sample_pools

    with pytest.raises(ValueError) as caught:
        sample_pools(replace(SampleParams(), **{field: value}), 0, plain_index, tmp_path)
    assert str(caught.value) == message


def test_difficulty_levels_by_expression_id_and_bad_tables(plain_index, tmp_path):
    import pandas as pd

    from stages.sample import sample_pools

    expressions = pd.read_parquet(plain_index / "expressions.parquet")
    train = expressions[expressions["split"] == "train"]
    levels = dict(zip(train["expression_id"], ["easy", "hard"] * (len(train) // 2) + ["easy"] * (len(train) % 2),
                      strict=True))
    pd.DataFrame({"expression_id": list(levels), "level": list(levels.values())}).to_parquet(tmp_path / "d.parquet")
    sample_pools(SampleParams(sft_first_k=2, grpo_size=10, difficulty_table=str(tmp_path / "d.parquet")), 0,
                 plain_index, tmp_path / "out")
    grpo = pd.read_parquet(tmp_path / "out" / "grpo.parquet")
    assert list(grpo["level"]) == [levels[e] for e in grpo["expression_id"]]
    assert (grpo["stratum"] == grpo["type"] + "/" + grpo["stratum"].str.split("/").str[1] + "/" + grpo["level"]).all()
    for columns, problem in (({"expression_id": ["x"]}, "no 'level' column"),
                             ({"video": ["v"], "level": ["easy"]}, "needs an 'expression_id' or 'sample_id' column")):
        path = tmp_path / f"bad{len(problem)}.parquet"
        pd.DataFrame(columns).to_parquet(path)
        with pytest.raises(ValueError) as caught:
            sample_pools(SampleParams(difficulty_table=str(path)), 0, plain_index, tmp_path / "bad")
        assert str(caught.value) == f"{path}: {problem}"
    missing = tmp_path / "none.parquet"
    with pytest.raises(ValueError) as caught:
        sample_pools(SampleParams(difficulty_table=str(missing)), 0, plain_index, tmp_path / "bad")
    assert str(caught.value) == f"sample.difficulty_table: {missing} does not exist (run the difficulty stage first)"


def test_distribution_table_chart_and_shortfall(plain_index, tmp_path, monkeypatch, caplog):
    import logging

    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.figure import Figure

    from stages.sample import sample_pools

    saved: list[tuple[str, list, str, str, list[str]]] = []
    original = Figure.savefig

    def record(fig, path, **kwargs):  # what the chart shows, read from the figure the stage saves
        ax = fig.axes[0]
        heights = [round(p.get_height(), 6) for p in ax.patches]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        saved.append((Path(path).name, heights, ax.get_title(), ax.get_ylabel(), labels))
        return original(fig, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    caplog.set_level(logging.WARNING, logger="stages.sample")
    report = sample_pools(SampleParams(sft_first_k=2, grpo_size=500, eval_size=4), 0, plain_index, tmp_path)
    dist = pd.read_parquet(tmp_path / "distribution.parquet")
    sizes = dist.groupby("group")["count"].transform("sum")
    assert (dist["fraction"] == dist["count"] / sizes).all()
    assert list(dist["group"].drop_duplicates()) == ["source:train", "source:valid", "sft", "grpo", "eval"]
    splits = pd.read_parquet(plain_index / "expressions.parquet")["split"].value_counts().to_dict()
    assert dist.groupby("group")["count"].sum()[["source:train", "source:valid"]].to_dict() == {
        "source:train": splits["train"], "source:valid": splits["valid"]}  # each split's own expressions
    [(name, heights, title, ylabel, legend)] = saved
    assert (name, title, ylabel) == ("distribution.png", "Expressions per stratum: source splits and pools",
                                     "fraction of group")
    assert legend == ["source:train", "source:valid", "sft", "grpo", "eval"]  # sources first, pools in DAG order
    pivot = dist.pivot_table(index="stratum", columns="group", values="fraction", fill_value=0.0)
    assert heights == [round(pivot.loc[s, g], 6) for g in legend for s in pivot.index]
    png = (tmp_path / "distribution.png").read_bytes()
    assert b"Software" not in png and b"matplotlib" not in png  # stable bytes: no version stamp
    assert Image.open(tmp_path / "distribution.png").size == (640, 320)  # 8 × 4 in at 80 dpi
    assert plt.get_fignums() == []  # closed
    train = dist[dist["group"] == "sft"]["count"].sum() + dist[dist["group"] == "grpo"]["count"].sum()
    grpo_n = report.metrics["grpo.total"]
    assert report.metrics["grpo.shortfall"] == 500 - grpo_n and "sft.shortfall" not in report.metrics
    assert "eval.shortfall" not in report.metrics and train == report.metrics["sft.total"] + grpo_n
    assert [r.getMessage() for r in caplog.records] == [f"pool grpo: asked for 500, only {grpo_n} candidates"]
    assert list(report.metrics) == sorted(report.metrics)
    assert report.tables["sampling distribution"].equals(dist)


def test_mixture_chart(mixed_index, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from stages.sample import sample_pools

    shown: dict[str, tuple] = {}
    original = Figure.savefig

    def record(fig, path, **kwargs):
        ax = fig.axes[0]
        shown[Path(path).name] = ([round(p.get_height(), 6) for p in ax.patches], ax.get_title(), ax.get_ylabel(),
                                  [t.get_text() for t in ax.get_legend().get_texts()],
                                  [t.get_text() for t in ax.get_xticklabels()])
        return original(fig, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    sample_pools(SampleParams(sft_first_k=2, sft_size=8, grpo_size=12), 0, mixed_index, tmp_path)
    heights, title, ylabel, legend, sources = shown["mixture.png"]
    assert (title, ylabel) == ("Training mixture: asked share and achieved fraction per source", "fraction of pool")
    assert legend == ["asked share", "sft", "grpo"] and sources == ["alpha", "beta"]
    assert heights == [0.75, 0.25, 0.75, 0.25, 0.75, 0.25]
    png = (tmp_path / "mixture.png").read_bytes()
    assert b"Software" not in png and Image.open(tmp_path / "mixture.png").size == (560, 280)  # 7 × 3.5 in, 80 dpi


def test_no_target_samples_leave_a_pool_none_of_whose_tasks_can_ask_them(caplog):
    import logging

    import pandas as pd

    from stages.sample import with_tasks

    caplog.set_level(logging.WARNING, logger="stages.sample")
    pool = pd.DataFrame({"expression_id": ["a", "b", "c"], "type": ["referring", "no_target", "no_target"]})
    out = with_tasks(pool, [["rcot_ktg"], ["rcot_ktg"], ["veason", "rcot_ktg"]])
    assert list(out["expression_id"]) == ["a", "c"] and list(out["tasks"]) == [["rcot_ktg"], ["veason"]]
    assert [r.getMessage() for r in caplog.records] == [
        "1 no-target expressions left the pool: none of their tasks can ask a no-target question"]
    caplog.clear()
    assert len(with_tasks(pool.iloc[:1], [["veason"]])) == 1 and caplog.records == []


def test_assign_tasks_counts_and_order_free():
    from stages.sample import assign_tasks

    ids = [f"e{i}" for i in range(10)]
    tasks = assign_tasks(ids, ("rcot_aks", "rcot_ktg"), (4.0, 6.0), 5, "grpo")
    assert [len(t) for t in tasks] == [1] * 10
    assert sorted(t[0] for t in tasks) == ["rcot_aks"] * 4 + ["rcot_ktg"] * 6
    shuffled = assign_tasks(ids[::-1], ("rcot_aks", "rcot_ktg"), (4.0, 6.0), 5, "grpo")
    assert dict(zip(ids[::-1], shuffled, strict=True)) == dict(zip(ids, tasks, strict=True))
    # the lowest-ranked 4 ids get the first task: ranks by the seeded hash of (seed, "sample", "task", pool, id)
    from stages.core.io import derive_seed

    ranked = sorted(ids, key=lambda e: derive_seed(5, "sample", "task", "grpo", e))
    assert {e for e, t in zip(ids, tasks, strict=True) if t == ["rcot_aks"]} == set(ranked[:4])
    other_pool = assign_tasks(ids, ("rcot_aks", "rcot_ktg"), (4.0, 6.0), 5, "eval")
    assert other_pool != tasks


def test_instance_weights_edges():
    from stages.sample import instance_weights

    assert instance_weights({"r/single": 3, "r/multi": 1}, 0.0) == {"r/single": 3.0, "r/multi": 1.0}
    assert instance_weights({"r/single": 3, "n/none": 2}, 3.0) == {"r/single": 3.0, "n/none": 2.0}  # no multi
    # 1 : 1 over single 6 + multi 2 = 8: each group weighs 4, split inside by its own counts; none keeps 2
    assert instance_weights({"a/single": 2, "b/single": 4, "a/multi": 2, "n/none": 2}, 1.0) == {
        "a/single": 4 / 3, "b/single": 8 / 3, "a/multi": 4.0, "n/none": 2.0}


def test_a_first_source_with_no_quota_does_not_stop_the_others(mixed_index, tmp_path):
    import shutil

    import pandas as pd

    from schemas.index import SourcesSchema
    from stages.core.io import write_table
    from stages.sample import sample_pools

    index = tmp_path / "index"
    shutil.copytree(mixed_index, index)
    sources = pd.read_parquet(index / "sources.parquet")
    write_table(sources.assign(share=sources["source"].map({"alpha": 1.0, "beta": 3.0}).fillna(0.0)), SourcesSchema,
                index / "sources.parquet")
    sample_pools(SampleParams(sft_first_k=2, sft_size=1, grpo_size=1), 0, index, tmp_path / "out")
    for pool in ("sft", "grpo"):  # 1 at 1 : 3 goes to beta; alpha (first by name) gets none
        assert list(pd.read_parquet(tmp_path / "out" / f"{pool}.parquet")["video"].map(_source_of)) == ["beta"]


def test_draw_ranks_by_seed_pool_and_id_with_and_without_sources():
    import pandas as pd

    from stages.core.io import derive_seed
    from stages.sample import _mixed

    ids = [f"S/train/v{i}#0" for i in range(12)]
    candidates = pd.DataFrame({"expression_id": ids, "stratum": ["referring/single"] * 12,
                               "source": ["alpha"] * 6 + ["beta"] * 6})

    def lowest(pool_ids: list[str], k: int) -> list[str]:  # rule 3: ranked by a hash of (seed, pool, id)
        return sorted(pool_ids, key=lambda e: derive_seed(9, "sample", "grpo", e))[:k]

    plain = _mixed(candidates, 4, candidates, None, 0.0, 9, "grpo")
    assert sorted(plain["expression_id"]) == sorted(lowest(ids, 4))
    mixed = _mixed(candidates, 4, candidates, {"alpha": 1.0, "beta": 1.0}, 0.0, 9, "grpo")
    assert sorted(mixed["expression_id"]) == sorted(lowest(ids[:6], 2) + lowest(ids[6:], 2))


# ---- third part: task assignment, mismatched inputs, charts of pools that lack a stratum ------------------------


def test_assign_tasks_fills_each_task_in_turn_from_the_seeded_ranking():
    from stages.core.io import derive_seed
    from stages.sample import assign_tasks

    ids = [f"S/train/v{i}#0" for i in range(6)]
    tasks, weights = ("veason", "rcot_kfg", "rcot_vdg"), (3.0, 2.0, 1.0)  # 3 + 2 + 1 of 6
    for seed in (5, 6):
        ranked = sorted(ids, key=lambda e: derive_seed(seed, "sample", "task", "sft", e))
        expected = {**{e: "veason" for e in ranked[:3]}, **{e: "rcot_kfg" for e in ranked[3:5]},
                    ranked[5]: "rcot_vdg"}
        assert assign_tasks(ids, tasks, weights, seed, "sft") == [[expected[e]] for e in ids]


def test_tasks_and_their_weights_must_pair_up():
    import pandas as pd

    from stages.sample import assign_tasks, with_tasks

    with pytest.raises(ValueError, match="zip"):
        assign_tasks(["a#0", "b#0"], ("veason", "rcot_kfg"), (1.0,), 0, "sft")
    pool = pd.DataFrame({"expression_id": ["a#0", "b#0"], "type": ["referring", "referring"]})
    with pytest.raises(ValueError, match="zip"):
        with_tasks(pool, [["veason"]])


def test_an_empty_distribution_keeps_its_columns():
    import pandas as pd

    from stages.sample import _distribution

    empty = pd.DataFrame({"split": pd.Series(dtype=str), "stratum": pd.Series(dtype=str)})
    dist = _distribution(empty, {"sft": empty})
    assert dist.empty and dist.columns.tolist() == ["group", "stratum", "count", "fraction"]


def test_a_stratum_missing_from_a_group_is_a_zero_bar(plain_index, tmp_path, monkeypatch):
    import math

    import pandas as pd
    from matplotlib.figure import Figure

    from stages.sample import sample_pools

    heights: list[float] = []
    original = Figure.savefig

    def record(fig, path, **kwargs):
        if Path(path).name == "distribution.png":
            heights.extend(p.get_height() for p in fig.axes[0].patches)
        return original(fig, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    sample_pools(SampleParams(sft_first_k=1, grpo_size=1, eval_size=1), 0, plain_index, tmp_path)
    dist = pd.read_parquet(tmp_path / "distribution.parquet")
    strata, groups = dist["stratum"].nunique(), dist["group"].nunique()
    assert len(dist) < strata * groups  # the one-expression pools lack most strata …
    assert len(heights) == strata * groups and all(math.isfinite(h) for h in heights)  # … drawn as 0, not NaN
    assert sum(h == 0.0 for h in heights) == strata * groups - len(dist)


@pytest.mark.parametrize(("k", "first"), [
    (3, ["0", "1", "2"]),  # numbers as numbers: not "0", "1", "10"
    (12, [str(i) for i in range(12)]),  # every number before any other id …
    (13, [str(i) for i in range(12)] + ["a"]),  # … and the others in text order, not as listed
])
def test_the_first_k_of_a_video_are_its_first_in_published_order(tmp_path, k, first):
    import pandas as pd

    from stages.sample import sample_pools
    from tests.revos_factory import VideoSpec
    from tests.stages.test_sample import write_index

    ids = [str(i) for i in range(12)] + ["a", "b"]  # listed backwards below: "b" before "a"
    spec = VideoSpec("P/train/v", n_frames=4, objects={11: [(2, 2, 10, 10)] * 4}, expressions=[
        {"exp": f"the box {i}", "obj_id": [0], "anno_id": [11], "type_id": 0} for i in range(len(ids))])
    write_index(tmp_path / "index", [spec])
    table = pd.read_parquet(tmp_path / "index" / "expressions.parquet")
    table["exp_id"] = [ids[int(e)] for e in table["exp_id"]]  # the ids above, then the rows listed backwards
    table["expression_id"] = "P/train/v#" + table["exp_id"]
    table.iloc[::-1].to_parquet(tmp_path / "index" / "expressions.parquet", index=False)
    sample_pools(SampleParams(sft_first_k=k, grpo_size=0), 0, tmp_path / "index", tmp_path / "out")
    assert sorted(pd.read_parquet(tmp_path / "out" / "sft.parquet")["exp_id"]) == sorted(first)


def test_motion_strata_at_the_threshold_and_no_levels_without_a_table(tmp_path):
    import pandas as pd

    from stages.sample import sample_pools
    from tests.revos_factory import VideoSpec
    from tests.stages.test_sample import write_index

    # 24 × 32 frames (diagonal 40): a box centre that travels (6, 8) = 10 px moves exactly 0.25 of the diagonal;
    # the first box is a single pixel (area 1 is visible)
    moving = VideoSpec("M/train/moving", n_frames=2, objects={11: [(2, 2, 3, 3), (7, 9, 10, 12)]}, expressions=[
        {"exp": "the box that moves", "obj_id": [0], "anno_id": [11], "type_id": 0}])
    still = VideoSpec("M/train/still", n_frames=2, objects={21: [(2, 2, 10, 10)] * 2}, expressions=[
        {"exp": "the box that stays", "obj_id": [0], "anno_id": [21], "type_id": 1}])
    never = VideoSpec("M/train/never", n_frames=2, objects={31: [None, None]}, expressions=[
        {"exp": "the box that never shows", "obj_id": [0], "anno_id": [31], "type_id": 0}])
    write_index(tmp_path / "index", [moving, still, never])
    sample_pools(SampleParams(motion_strata=True, motion_threshold=0.25, sft_first_k=1, grpo_size=0), 0,
                 tmp_path / "index", tmp_path / "out")
    sft = pd.read_parquet(tmp_path / "out" / "sft.parquet").set_index("video")
    assert sft.loc["M/train/moving", "stratum"] == "referring/single/motion"  # at the threshold counts
    assert sft.loc["M/train/still", "stratum"] == "reasoning/single/static"
    assert sft.loc["M/train/never", "stratum"].endswith("/static")  # a target never seen has not moved
    assert sft.loc["M/train/never", "motion"] == 0.0 and sft.loc["M/train/moving", "motion"] == 0.25
    assert sft["level"].isna().all()  # no difficulty table: no level (not an empty one)


@pytest.mark.parametrize("key", ["sft_tasks", "grpo_tasks"])
def test_a_task_list_problem_names_its_params_key(plain_index, tmp_path, key):
    from stages.sample import sample_pools

    with pytest.raises(ValueError, match=rf"^sample\.{key}: no task named$"):
        sample_pools(SampleParams(**{key: ()}), 0, plain_index, tmp_path)


def test_a_no_target_expression_has_not_moved(tmp_path):
    import pandas as pd

    from stages.sample import _motion
    from tests.revos_factory import VideoSpec
    from tests.stages.test_sample import write_index

    spec = VideoSpec("N/valid/v", split="valid", n_frames=2, objects={11: [(2, 2, 10, 10), (8, 8, 16, 16)]},
                     expressions=[{"exp": "the purple cat", "obj_id": [], "anno_id": [], "type_id": 2},
                                  {"exp": "the box", "obj_id": [0], "anno_id": [11], "type_id": 0}])
    write_index(tmp_path / "index", [spec])
    tables = [pd.read_parquet(tmp_path / "index" / f"{name}.parquet") for name in ("expressions", "tracks", "videos")]
    assert _motion(*tables).tolist() == [0.0, pytest.approx((6 ** 2 + 6 ** 2) ** 0.5 / 40)]


@pytest.mark.parametrize("disjoint", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_pools_draw_by_the_seeded_hash_of_pool_and_id_from_every_expression(tmp_path, seed, disjoint):
    import json

    import pandas as pd

    from stages.core.io import derive_seed
    from stages.core.lineage import code_hash
    from stages.sample import assign_tasks, sample_pools
    from tests.revos_factory import VideoSpec
    from tests.stages.test_sample import write_index

    # one stratum, one source, two expressions a video: sft_first_k = 0 (all of them); 3 of the 16 drawn for SFT,
    # then 3 for GRPO from the rest (disjoint) or from all 16 (for both seeds one SFT id is then among them)
    specs = [VideoSpec(f"D/train/v{i}", n_frames=2, objects={10 + i: [(2, 2, 10, 10)] * 2}, expressions=[
        {"exp": f"box {i}", "obj_id": [0], "anno_id": [10 + i], "type_id": 0},
        {"exp": f"the box {i}", "obj_id": [0], "anno_id": [10 + i], "type_id": 0}]) for i in range(8)]
    specs += [VideoSpec(f"D/valid/w{i}", split="valid", n_frames=2, objects={30 + i: [(2, 2, 10, 10)] * 2},
                        expressions=[{"exp": f"box {i}", "obj_id": [0], "anno_id": [30 + i], "type_id": 0}])
              for i in range(7)]
    write_index(tmp_path / "index", specs)
    params = SampleParams(sft_first_k=0, sft_size=3, grpo_size=3, eval_size=5, disjoint=disjoint,
                          grpo_tasks=("veason", "rcot_kfg"), grpo_task_weights=(1.0, 1.0))
    out = tmp_path / "deep" / "out"  # its folders are made
    report = sample_pools(params, seed, tmp_path / "index", out)
    assert report.markdown.startswith("![sampling distribution](data:image/png;base64,") and report.stage == "sample"
    lineage = json.loads((out / "lineage.json").read_text())
    assert (lineage["stage"], lineage["seed"], lineage["params"]["sft_size"]) == ("sample", seed, 3)
    assert lineage["inputs"]["index"]["path"] == (tmp_path / "index").as_posix()
    assert lineage["code_version"]["sha256"] == code_hash(["stages.sample", "schemas.sample"])
    expressions = pd.read_parquet(tmp_path / "index" / "expressions.parquet")
    ids = list(expressions.loc[expressions["split"] == "train", "expression_id"])
    valid = list(expressions.loc[expressions["split"] == "valid", "expression_id"])
    sft = sorted(ids, key=lambda e: derive_seed(seed, "sample", "sft", e))[:3]
    rest = [e for e in ids if e not in sft] if disjoint else ids
    grpo = sorted(rest, key=lambda e: derive_seed(seed, "sample", "grpo", e))[:3]
    assert disjoint or set(sft) & set(grpo)
    assert sorted(pd.read_parquet(out / "sft.parquet")["expression_id"]) == sorted(sft)
    assert sorted(pd.read_parquet(out / "grpo.parquet")["expression_id"]) == sorted(grpo)
    evaluation = sorted(valid, key=lambda e: derive_seed(seed, "sample", "eval", e))[:5]
    assert sorted(pd.read_parquet(out / "eval.parquet")["expression_id"]) == sorted(evaluation)
    for name in ("grpo", "eval"):  # each pool's tasks: assign_tasks (tested above) with this run's seed and pool
        pool = pd.read_parquet(out / f"{name}.parquet")
        assert [list(t) for t in pool["tasks"]] == assign_tasks(list(pool["expression_id"]), params.grpo_tasks,
                                                                params.grpo_task_weights, seed, name)


def test_draw_pairs_each_id_with_its_stratum():
    with pytest.raises(ValueError, match="zip"):
        draw(["a", "b"], ["s"], {"s": 1}, 0, "sft")


def test_allocate_rule_one_over_the_source_strata_only_then_top_up():
    # a stratum outside the source gets nothing while the source strata have items (weight 0, not 1)
    assert allocate(4, {"a": 1}, {"a": 10, "b": 10}) == {"a": 4, "b": 0}
    # rule 1 apportions 4 over a, b, c (2, 1, 1 by largest remainder, ties by key); c is empty and keeps its
    # unfilled quota; the top-up round gives the 1 left to a (tie with b, by key): 3, 1, 0, not 2, 2, 0
    assert allocate(4, {"a": 1, "b": 1, "c": 1}, {"a": 10, "b": 10, "c": 0}) == {"a": 3, "b": 1, "c": 0}
    # a source stratum with no candidates at all takes its rule-1 quota (its key sorts first: the remainder too),
    # and no top-up round: the 2 left go to a and b
    assert allocate(4, {"0": 1, "a": 1, "b": 1}, {"a": 10, "b": 10}) == {"0": 0, "a": 2, "b": 2}


def test_allocate_keeps_fractional_source_weights_proportional():
    # instance_weights gives fractional weights: a sum of 1 is still proportional, not an even share
    assert allocate(4, {"a": 0.25, "b": 0.75}, {"a": 10, "b": 10}) == {"a": 1, "b": 3}
