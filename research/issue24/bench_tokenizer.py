"""Which tiny tokenizer does the default SFT teach the answer format with? The SFT stage's own `train_sft` on a
project copy's shards, once from a tiny random Qwen2.5-VL with each tokenizer `stages.tiny_models.tiny_qwen` can build:
GPT-2's byte-level regex (each number one token; the default) and Qwen2's pre-tokenizer (digit by digit,
`build_tokenizer(digits=True)`), the same `tiny_models` params and seed otherwise.

Per tokenizer: the stage's metrics (held-out format rate before and after, final loss, steps), the tokens of one
example box, and the wall time. Same machine, one after the other.

    python research/issue24/bench_tokenizer.py --repo /tmp/copy     # a copy where `dvc repro shard` has run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.results_io import write_result  # noqa: E402
from stages.params import load_params  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"  # this study's results, beside it

TOKENIZERS = {"whole_numbers": False, "digits": True}  # name → build_tokenizer(digits=…)


def run(repo: Path, digits: bool, tmp: Path) -> dict:
    """Build the tiny model with the tokenizer, then the SFT stage on `repo`'s shards; the stage's metrics."""
    from stages.sft import train_sft
    from stages.tiny_models.tiny_qwen import build_tiny_qwen

    params = load_params(repo / "params.yaml")
    build_tiny_qwen(params.tiny_models, tmp / "base", digits=digits)
    model = dataclasses.replace(params.model, path=str(tmp / "base"))
    started = time.perf_counter()
    report = train_sft(params.sft, model, repo / "data" / "shards", tmp / "sft", tmp / "checkpoints", tmp / "metrics")
    wall = time.perf_counter() - started
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tmp / "base")
    box = "[52, 63, 77, 99]"
    return {"wall_s": round(wall, 1), "box_tokens": [tokenizer.decode([i]) for i in tokenizer(box)["input_ids"]],
            **{key: value for key, value in report.metrics.items() if isinstance(value, int | float)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="project copy where `dvc repro shard` has run")
    parser.add_argument("--out", type=Path, help="results file; default results/tokenizer.json here")
    args = parser.parse_args()
    repo = args.repo.resolve()
    out = args.out.resolve() if args.out else RESULTS / "tokenizer.json"  # before the chdir: relative to where it ran
    os.chdir(repo)  # the SFT processes read the shards and write by the params' relative paths
    figures: dict = {}
    for name, digits in TOKENIZERS.items():
        with tempfile.TemporaryDirectory(prefix=f"bench-tokenizer-{name}-") as tmp:
            figures[name] = run(repo, digits, Path(tmp))
        print(json.dumps({name: figures[name]}), flush=True)
    name = out.stem if out else "tokenizer"  # the record names the file it is in
    write_result(name, figures, "whole_numbers (the default tiny tokenizer)", out=out)


if __name__ == "__main__":
    main()
