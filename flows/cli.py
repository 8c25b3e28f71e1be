"""The `vrsflow` command line.

    vrsflow stage NAME [--params params.yaml]   run one stage's Prefect flow (what dvc.yaml calls)
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys


def _stage(args: argparse.Namespace) -> int:
    module = importlib.import_module(f"flows.{args.name}")
    module.run(params_path=args.params)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (sub-commands register here)."""
    parser = argparse.ArgumentParser(
        prog="vrsflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    stage = sub.add_parser("stage", help="run one pipeline stage as a Prefect flow")
    stage.add_argument("name", help="stage name, e.g. synth, ingest")
    stage.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    stage.set_defaults(func=_stage)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vrsflow` console script."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
