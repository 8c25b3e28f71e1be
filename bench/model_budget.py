"""What the committed models cost the repository (issue 47: at most 40 MB in all, every version ever committed).

    python bench/model_budget.py [--candidate NAME=DIR …] [--out FILE]

Sums git's stored size (zlib-compressed, or a delta in a pack: `%(objectsize:disk)`) of every distinct file ever
committed under models/ in HEAD's history, and what is left of the budget. `--candidate` adds what a folder of
weights not yet committed would cost, each file zlib-compressed as git stores a new object. Writes
bench/results/model-budget.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL_HISTORY_BYTES = 40_000_000  # issue 47: the repository grows by at most 40 MB in all


def committed_model_bytes(root: Path) -> dict[str, tuple[str, int]]:
    """{blob id: (path it was first committed at, bytes git stores it in)} for every distinct file ever committed
    under models/ in HEAD's history. (A shallow clone holds less history: there it is what that clone holds.)"""
    listing = subprocess.run(["git", "rev-list", "--objects", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    paths = dict(line.split(" ", 1) for line in listing if " " in line and line.split(" ", 1)[1].startswith("models/"))
    sizes = subprocess.run(["git", "cat-file", "--batch-check=%(objecttype) %(objectname) %(objectsize:disk)"],
                           cwd=root, input="".join(f"{i}\n" for i in paths), capture_output=True, text=True,
                           check=True).stdout.split("\n")
    return {name: (paths[name], int(size)) for kind, name, size in (line.split() for line in sizes if line)
            if kind == "blob"}


def stored_bytes(folder: Path) -> int:
    """What committing `folder`'s files would add: each file zlib-compressed (git's default level)."""
    return sum(len(zlib.compress(p.read_bytes(), 6)) for p in sorted(folder.iterdir()) if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", action="append", default=[], help="NAME=DIR: weights not yet committed")
    parser.add_argument("--out", type=Path, help="results file; default bench/results/model-budget.json")
    args = parser.parse_args()
    history = committed_model_bytes(ROOT)
    used = sum(size for _, size in history.values())
    figures: dict = {"budget_bytes": MODEL_HISTORY_BYTES, "used_bytes": used, "left_bytes": MODEL_HISTORY_BYTES - used,
                     "files": [{"blob": blob, "path": path, "stored_bytes": size}  # a list: largest first
                               for blob, (path, size) in sorted(history.items(), key=lambda kv: -kv[1][1])],
                     "candidates": {}}
    for item in args.candidate:
        name, _, folder = item.partition("=")
        if not name or not Path(folder).is_dir():
            parser.error(f"--candidate {item}: expected NAME=DIR with DIR a folder")
        cost = stored_bytes(Path(folder))
        figures["candidates"][name] = {"stored_bytes": cost, "fits": used + cost <= MODEL_HISTORY_BYTES}
    name = args.out.stem if args.out else "model-budget"
    write_result(name, figures, "none: bytes git stores, against the 40 MB issue 47 allows", code=("models",),
                 out=args.out)


if __name__ == "__main__":
    main()
