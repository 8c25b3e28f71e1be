"""`sample` stage: the SFT-CoT, GRPO and evaluation pools, stratified and seeded.

Strata: type (referring / reasoning [/ no_target]) × instances (single / multi [/ none]), optionally
× motion (motion-heavy or not) and × difficulty level. Pools keep the source proportions with exact
sizes (`stages.sample.stratify`). SFT follows Veason-R1: the first k expressions of every training
video, then stratified down to `sft_size` if asked. GRPO draws from the rest of the training split
(pools are disjoint unless `disjoint: false`). Evaluation is the valid split. No-target expressions
stay out of the training pools by default and in evaluation.

Sizes are exact: quotas by largest remainder over the *source* proportions of the training split
(evaluation: of the valid split). Top-up rule: when a stratum has fewer candidates than its quota
(SFT's first-k rule or an earlier pool took them), its shortfall is re-apportioned by largest
remainder over the strata that still have spare candidates, in proportion to their source sizes,
until the pool is full; a pool is smaller than asked only when the candidates run out
(`<pool>.shortfall` metric + a warning). Full rules: `stages.sample.stratify`, docs/sampling.md.

Several training sources (ingest's `sources.parquet`, from `data.sources`): SFT and GRPO first get exact
per-source quotas — the pool size apportioned by largest remainder over the sources' shares, with the same
top-up rule when a source runs out — then each source's quota is drawn with the strata above, weighted by
that source's own proportions. A source with share 0 stays out of the training pools. The achieved mixture
is `mixture.parquet`, `mixture.png` and the `<pool>.source.<name>` metrics.
"""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from schemas.index import ExpressionsSchema, SourcesSchema, TracksSchema, VideosSchema  # noqa: E402
from schemas.sample import DistributionSchema, MixtureSchema, SampleSchema  # noqa: E402
from stages.core.ids import sample_id  # noqa: E402
from stages.core.io import derive_seed, read_table, write_table  # noqa: E402
from stages.core.lineage import write_lineage  # noqa: E402
from stages.core.report import StageReport, image_markdown  # noqa: E402
from stages.params.sample import SampleParams  # noqa: E402
from stages.sample.stratify import allocate, draw, largest_remainder  # noqa: E402
from stages.tasks import check_tasks, get_task  # noqa: E402

log = logging.getLogger(__name__)
COLUMNS = list(SampleSchema.to_schema().columns)


def sample_pools(params: SampleParams, seed: int, index_dir: Path, out_dir: Path) -> StageReport:
    """Write `out_dir/{sft,grpo,eval}.parquet`, the distribution table and chart, and lineage.

    Args:
        params: the `sample` block.
        seed: the global seed (the draw is ranked by a hash of seed, pool and expression id).
        index_dir: ingest's tables.
        out_dir: `data/sample`.

    Returns:
        metrics `<pool>.total`, `<group>.<stratum>` counts (groups: source:train, source:valid and the
        pools) and `<pool>.shortfall` when a pool could not be filled; the distribution table.

    Raises:
        ValueError: negative sizes, a missing or malformed difficulty table.
    """
    _check(params)
    index_dir, out_dir = Path(index_dir), Path(out_dir)
    expressions = read_table(index_dir / "expressions.parquet", ExpressionsSchema)
    tracks = read_table(index_dir / "tracks.parquet", TracksSchema)
    videos = read_table(index_dir / "videos.parquet", VideosSchema)
    candidates = _annotate(expressions, tracks, videos, params)

    sft_tasks = check_tasks(params.sft_tasks, "sample.sft_tasks")
    grpo_tasks = check_tasks(params.grpo_tasks, "sample.grpo_tasks")
    shares = _shares(index_dir)  # None: data.root alone
    train = candidates[candidates["split"] == "train"]
    if not params.include_no_target_train:
        train = train[train["type"] != "no_target"]

    # the first k *usable* expressions of each video (after excluding no-target ones)
    first_k = train[train.groupby("video").cumcount() < params.sft_first_k] if params.sft_first_k > 0 else train
    sft = _mixed(first_k, params.sft_size, train, shares, params.single_multi_ratio, seed, "sft")
    rest = train[~train["expression_id"].isin(sft["expression_id"])] if params.disjoint else train
    grpo = _mixed(rest, params.grpo_size, train, shares, params.single_multi_ratio, seed, "grpo")

    valid = candidates[candidates["split"] == "valid"]
    if not params.include_no_target_eval:
        valid = valid[valid["type"] != "no_target"]
    eval_pool = _stratified(valid, params.eval_size, valid["stratum"].value_counts().to_dict(), seed, "eval")

    pools = {"sft": with_tasks(sft, [sft_tasks] * len(sft)),
             "grpo": with_tasks(grpo, assign_tasks(list(grpo["expression_id"]), grpo_tasks, params.grpo_task_weights,
                                                   seed, "grpo")),
             "eval": eval_pool.assign(tasks=assign_tasks(list(eval_pool["expression_id"]), grpo_tasks,
                                                         params.grpo_task_weights, seed, "eval"))}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, pool in pools.items():
        # the source stays in the index (videos / expressions `source`): a sample's video key names it
        table = pool.assign(pool=name, sample_id=pool["expression_id"].map(sample_id))[COLUMNS]
        write_table(table.sort_values("sample_id"), SampleSchema, out_dir / f"{name}.parquet")
    distribution = _distribution(candidates, pools)
    write_table(distribution, DistributionSchema, out_dir / "distribution.parquet")
    _plot(distribution, out_dir / "distribution.png")
    counts = {name: len(pool) for name, pool in pools.items()}
    write_lineage(out_dir, "sample", params, inputs={"index": index_dir}, seed=seed, counts=counts,
                  code_modules=["stages.sample", "schemas.sample"])
    metrics: dict[str, float | int] = {f"{name}.total": n for name, n in counts.items()}
    for row in distribution.itertuples(index=False):
        metrics[f"{row.group}.{row.stratum}"] = int(row.count)
    tables = {"sampling distribution": distribution}
    markdown = image_markdown(out_dir / "distribution.png", "sampling distribution")
    if shares is not None:
        mixture = _mixture(pools, shares)
        write_table(mixture, MixtureSchema, out_dir / "mixture.parquet")
        _plot_mixture(mixture, out_dir / "mixture.png")
        for row in mixture.itertuples(index=False):
            metrics[f"{row.pool}.source.{row.source}"] = int(row.count)
        tables["training mixture (asked share vs achieved)"] = mixture
        markdown += "\n\n" + image_markdown(out_dir / "mixture.png", "training mixture")
    asked = {"sft": params.sft_size, "grpo": params.grpo_size, "eval": params.eval_size}
    for name, n in counts.items():
        if asked[name] > n:
            log.warning("pool %s: asked for %d, only %d candidates", name, asked[name], n)
            metrics[f"{name}.shortfall"] = asked[name] - n
    return StageReport("sample", metrics=dict(sorted(metrics.items())), tables=tables, markdown=markdown)


def _shares(index_dir: Path) -> dict[str, float] | None:
    """Training source → asked share (ingest's sources.parquet), or None when the index has one source."""
    path = index_dir / "sources.parquet"
    if not path.is_file():
        return None
    sources = read_table(path, SourcesSchema)
    train = sources[sources["split"] == "train"]
    return {str(s): float(w) for s, w in zip(train["source"], train["share"], strict=True)}


def _mixed(candidates: pd.DataFrame, size: int, train: pd.DataFrame, shares: dict[str, float] | None,
           single_multi_ratio: float, seed: int, pool: str) -> pd.DataFrame:
    """A training pool of `size` (0 = all): exact per-source quotas over `shares`, then each source's strata
    weighted by that source's own training proportions (`train`); without sources, the strata alone."""
    if shares is None:
        weights = instance_weights(train["stratum"].value_counts().to_dict(), single_multi_ratio)
        return _stratified(candidates, size, weights, seed, pool)
    candidates = candidates[candidates["source"].isin([s for s, w in shares.items() if w > 0])]
    if size <= 0 or size >= len(candidates):
        return candidates
    quotas = allocate(size, {s: w for s, w in shares.items() if w > 0},
                      candidates["source"].value_counts().to_dict())
    parts = []
    for source, quota in sorted(quotas.items()):
        if quota <= 0:
            continue
        own = train[train["source"] == source]
        weights = instance_weights(own["stratum"].value_counts().to_dict(), single_multi_ratio)
        parts.append(_stratified(candidates[candidates["source"] == source], quota, weights, seed, pool))
    return pd.concat(parts) if parts else candidates.iloc[:0]


def _mixture(pools: dict[str, pd.DataFrame], shares: dict[str, float]) -> pd.DataFrame:
    """Per pool and source: the asked share (normalised over the sources with a share; eval: data.root) and the
    achieved count and fraction."""
    rows = []
    for name, pool in pools.items():
        asked = {"root": 1.0} if name == "eval" else {s: w for s, w in shares.items() if w > 0}
        total_share = sum(asked.values()) or 1.0
        achieved = pool["source"].value_counts().to_dict()
        for source in sorted(set(asked) | set(achieved)):
            count = int(achieved.get(source, 0))
            rows.append({"pool": name, "source": source, "share": asked.get(source, 0.0) / total_share,
                         "count": count, "fraction": count / max(len(pool), 1)})
    return pd.DataFrame(rows, columns=["pool", "source", "share", "count", "fraction"])


def _plot_mixture(mixture: pd.DataFrame, path: Path) -> None:
    train = mixture[mixture["pool"] != "eval"]
    pivot = train.pivot_table(index="source", columns="pool", values="fraction", fill_value=0.0)
    asked = train.groupby("source")["share"].max()
    pivot["asked share"] = asked
    fig, ax = plt.subplots(figsize=(7, 3.5))
    pivot[[c for c in ("asked share", "sft", "grpo") if c in pivot.columns]].plot.bar(ax=ax)
    ax.set_ylabel("fraction of pool")
    ax.set_title("Training mixture: asked share and achieved fraction per source")
    fig.tight_layout()
    fig.savefig(path, dpi=80, metadata={"Software": None})  # stable bytes
    plt.close(fig)


def instance_weights(source: dict[str, int], single_multi_ratio: float) -> dict[str, float]:
    """Stratum weights for the training pools: the source counts, or — when `single_multi_ratio` > 0 — rescaled
    so that single-instance strata weigh `single_multi_ratio` times the multi-instance ones in total
    (RCoT-Seg: 3:1), keeping the proportions inside each group; other strata keep their source share."""
    out = {k: float(v) for k, v in source.items()}
    if single_multi_ratio <= 0:
        return out
    single = [k for k in source if k.split("/")[1] == "single"]
    multi = [k for k in source if k.split("/")[1] == "multi"]
    n_single, n_multi = sum(source[k] for k in single), sum(source[k] for k in multi)
    if not n_single or not n_multi:
        return out
    paired = n_single + n_multi
    for keys, size, share in ((single, n_single, single_multi_ratio / (1 + single_multi_ratio)),
                              (multi, n_multi, 1 / (1 + single_multi_ratio))):
        for k in keys:
            out[k] = paired * share * source[k] / size
    return out


def assign_tasks(ids: list[str], tasks: tuple[str, ...], weights: tuple[float, ...], seed: int,
                 pool: str) -> list[list[str]]:
    """One task per sample: counts by largest remainder over `weights`, samples ranked by a seeded hash of
    their id (order-independent); returned in the order of `ids`."""
    counts = largest_remainder(len(ids), dict(zip(tasks, weights, strict=True)))
    ranked = sorted(ids, key=lambda e: derive_seed(seed, "sample", "task", pool, e))
    chosen: dict[str, str] = {}
    start = 0
    for task in tasks:
        for e in ranked[start:start + counts[task]]:
            chosen[e] = task
        start += counts[task]
    return [[chosen[e]] for e in ids]


def with_tasks(pool: pd.DataFrame, tasks: list) -> pd.DataFrame:
    """The pool with a `tasks` column; a no-target expression keeps only the tasks that can ask it (a task
    whose answer needs a target cannot), and leaves the pool when none is left."""
    kept = []
    for tasks_of, kind in zip(tasks, pool["type"], strict=True):
        kept.append([t for t in tasks_of if kind != "no_target" or get_task(t).supports_no_target])
    out = pool.assign(tasks=kept)
    dropped = int((out["tasks"].map(len) == 0).sum())
    if dropped:
        log.warning("%d no-target expressions left the pool: none of their tasks can ask a no-target question",
                    dropped)
    return out[out["tasks"].map(len) > 0]


def _check(params: SampleParams) -> None:
    for name in ("sft_first_k", "sft_size", "grpo_size", "eval_size"):
        if getattr(params, name) < 0:
            raise ValueError(f"sample.{name} must be ≥ 0 (0 = all), got {getattr(params, name)}")
    if params.motion_threshold <= 0:
        raise ValueError(f"sample.motion_threshold must be > 0, got {params.motion_threshold}")


def _annotate(expressions: pd.DataFrame, tracks: pd.DataFrame, videos: pd.DataFrame,
              params: SampleParams) -> pd.DataFrame:
    """Add motion, level and stratum columns."""
    # "first k expressions of a video" needs the published order: by video, then exp_id as a number
    order = expressions["exp_id"].map(lambda e: (0, int(e), "") if str(e).isdigit() else (1, 0, str(e)))
    df = expressions.assign(_order=order).sort_values(["split", "video", "_order"], kind="stable")
    df = df.drop(columns="_order").reset_index(drop=True)
    df["motion"] = _motion(df, tracks, videos)
    instances = np.select([df["n_instances"] == 0, df["n_instances"] == 1], ["none", "single"], "multi")
    df["stratum"] = df["type"] + "/" + instances
    if params.motion_strata:
        df["stratum"] += np.where(df["motion"] >= params.motion_threshold, "/motion", "/static")
    df["level"] = None
    if params.difficulty_table:
        levels = _levels(Path(params.difficulty_table), df)
        df["level"] = df["expression_id"].map(levels)
        df["stratum"] += "/" + df["level"].fillna("unscored")
    return df


def _levels(path: Path, expressions: pd.DataFrame) -> dict[str, str]:
    """expression_id → difficulty level from a difficulty table keyed by expression_id or sample_id.

    Raises:
        ValueError: the file is missing, has no level column, or no key column.
    """
    if not path.is_file():
        raise ValueError(f"sample.difficulty_table: {path} does not exist (run the difficulty stage first)")
    table = pd.read_parquet(path)
    if "level" not in table.columns:
        raise ValueError(f"{path}: no 'level' column")
    if "expression_id" in table.columns:
        return dict(zip(table["expression_id"], table["level"], strict=True))
    if "sample_id" not in table.columns:
        raise ValueError(f"{path}: needs an 'expression_id' or 'sample_id' column")
    by_sample = dict(zip(table["sample_id"], table["level"], strict=True))
    return {e: by_sample[s] for e in expressions["expression_id"] if (s := sample_id(e)) in by_sample}


def _motion(expressions: pd.DataFrame, tracks: pd.DataFrame, videos: pd.DataFrame) -> pd.Series:
    """Per expression: the largest travel of a target's box centre from its first visible position,
    divided by the frame diagonal (0 for no-target)."""
    present = tracks[tracks["area"] > 0].sort_values(["anno_id", "frame_idx"])
    cx = (present["x1"] + present["x2"]) / 2
    cy = (present["y1"] + present["y2"]) / 2
    first_x = cx.groupby(present["anno_id"]).transform("first")
    first_y = cy.groupby(present["anno_id"]).transform("first")
    travel = np.hypot(cx - first_x, cy - first_y).groupby(present["anno_id"]).max()
    diagonal = videos.set_index("video").eval("(height ** 2 + width ** 2) ** 0.5")
    anno_video = present.groupby("anno_id")["video"].first()
    per_anno = (travel / anno_video.map(diagonal)).to_dict()
    return expressions["anno_ids"].map(lambda ids: max((per_anno.get(int(a), 0.0) for a in ids), default=0.0))


def _stratified(candidates: pd.DataFrame, size: int, source: dict[str, float], seed: int, pool: str) -> pd.DataFrame:
    """`size` rows (0 = all) keeping the source proportions; see stages.sample.stratify."""
    if size <= 0 or size >= len(candidates):
        return candidates
    available = candidates["stratum"].value_counts().to_dict()
    counts = allocate(size, source, available)
    chosen = draw(list(candidates["expression_id"]), list(candidates["stratum"]), counts, seed, pool)
    return candidates[candidates["expression_id"].isin(set(chosen))]


def _distribution(candidates: pd.DataFrame, pools: dict[str, pd.DataFrame]) -> pd.DataFrame:
    groups = {f"source:{split}": candidates[candidates["split"] == split] for split in ("train", "valid")}
    groups.update(pools)
    rows = []
    for group, df in groups.items():
        total = max(len(df), 1)
        for stratum, count in sorted(df["stratum"].value_counts().items()):
            rows.append({"group": group, "stratum": stratum, "count": int(count), "fraction": count / total})
    return pd.DataFrame(rows, columns=["group", "stratum", "count", "fraction"])


def _plot(distribution: pd.DataFrame, path: Path) -> None:
    pivot = distribution.pivot_table(index="stratum", columns="group", values="fraction", fill_value=0.0)
    order = ["source:train", "source:valid", "sft", "grpo", "eval"]  # sources first, pools in DAG order
    pivot = pivot[[g for g in order if g in pivot.columns] + [g for g in pivot.columns if g not in order]]
    fig, ax = plt.subplots(figsize=(8, 4))
    pivot.plot.bar(ax=ax)
    ax.set_ylabel("fraction of group")
    ax.set_title("Expressions per stratum: source splits and pools")
    fig.tight_layout()
    fig.savefig(path, dpi=80, metadata={"Software": None})  # no version/timestamp → stable bytes
    plt.close(fig)
