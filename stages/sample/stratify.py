"""Stratified selection with exact sizes (what Veason-R1's `data_sampling.py` intends, done exactly).

Rules (docs/sampling.md):
1. **Quotas** — a pool of size n keeps the *source* proportions: stratum s gets n·N_s/N items, rounded
   by the largest-remainder method (Hamilton), so the quotas are integers that sum to exactly n and
   each is within one item of its exact share.
2. **Top-up** — when a stratum has fewer available items than its quota (e.g. after an earlier pool
   took some), the shortfall is re-apportioned, again by largest remainder, over the strata that still
   have spare items, in proportion to their source sizes; repeated until the pool is full or nothing
   is left. The pool is smaller than asked only when the candidates run out; the report says so.
3. **Draw** — inside a stratum, items are ranked by a hash of (seed, pool, item id) and the first
   `quota` are taken: seeded, without duplicates, independent of input order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stages.core.io import derive_seed


def largest_remainder(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Integers proportional to `weights` that sum to `total` (Hamilton's method; ties by key)."""
    keys = sorted(weights)
    weight_sum = float(sum(weights[k] for k in keys))
    if total <= 0 or weight_sum <= 0:
        return {k: 0 for k in keys}
    exact = {k: total * weights[k] / weight_sum for k in keys}
    floors = {k: int(exact[k]) for k in keys}
    left = total - sum(floors.values())
    for k in sorted(keys, key=lambda k: (-(exact[k] - floors[k]), k))[:left]:
        floors[k] += 1
    return floors


def allocate(size: int, source: Mapping[str, int], available: Mapping[str, int]) -> dict[str, int]:
    """Per-stratum counts for a pool of `size`: source-proportional quotas, capped by availability,
    with the shortfall topped up from strata with spare items (rules 1–2 of the module docstring)."""
    strata = sorted(set(source) | set(available))
    size = min(size, sum(available.get(s, 0) for s in strata))
    counts = {s: 0 for s in strata}
    remaining = size
    weights = {s: float(source.get(s, 0)) for s in strata}
    first = True
    while remaining > 0:
        # rule 1 apportions over every source stratum (an empty one keeps its quota, unfilled); the
        # top-up rounds of rule 2 only over the strata that still have spare items
        open_strata = {s: w for s, w in weights.items() if first or available.get(s, 0) - counts[s] > 0}
        first = False
        if not any(available.get(s, 0) - counts[s] > 0 for s in open_strata):
            break
        if sum(open_strata.values()) <= 0:  # strata absent from the source: share evenly
            open_strata = {s: 1.0 for s in open_strata}
        quota = largest_remainder(remaining, open_strata)
        for s, q in quota.items():
            take = min(q, available.get(s, 0) - counts[s])
            counts[s] += take
            remaining -= take
    return counts


def draw(ids: Sequence[str], strata: Sequence[str], counts: Mapping[str, int], seed: int, pool: str) -> list[str]:
    """Take `counts[s]` ids of each stratum s, ranked by a seeded hash of (seed, pool, id) (rule 3).

    Returns the chosen ids in their input order.
    """
    ranked: dict[str, list[tuple[int, str]]] = {}
    for item, stratum in zip(ids, strata, strict=True):
        ranked.setdefault(stratum, []).append((derive_seed(seed, "sample", pool, item), item))
    chosen: set[str] = set()
    for stratum, items in ranked.items():
        chosen.update(item for _, item in sorted(items)[: counts.get(stratum, 0)])
    return [item for item in ids if item in chosen]
