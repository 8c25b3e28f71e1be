"""The `vrsflow` command line.

    vrsflow stage NAME [--params params.yaml]   run one stage's Prefect flow (what dvc.yaml calls)
    vrsflow lineage PATH                        print the chain from an output back to the raw data
    vrsflow serve [--project DIR]               serve the pipeline deployment for Prefect UI runs
    vrsflow remote [--params params.yaml]       set the DVC remote from params / environment
    vrsflow profile NAME                        print `-S key=value` overrides of profiles/NAME.yaml
    vrsflow evaluate --pred DIR --data ROOT     score VISA-layout predictions against a ReVOS root
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


def _lineage(args: argparse.Namespace) -> int:
    import json

    from stages.core.model_card import LineageNotFound, find_lineage, format_chain

    try:
        path = find_lineage(args.path)
    except LineageNotFound as err:
        sys.stderr.write(f"{err}\n")
        return 1
    record = json.loads(path.read_text())
    sys.stdout.write((json.dumps(record, indent=1, sort_keys=True) if args.json else format_chain(record)) + "\n")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from flows.pipeline import serve

    serve(project_dir=args.project, name=args.name)
    return 0


def _remote(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stages.core import dvc_cli
    from stages.core.params import load_params

    params = load_params(args.params)
    url = dvc_cli.remote_url(params.remote.url, params.remote.url_env)
    if not url:
        sys.stderr.write(f"no remote: set remote.url in {args.params} or ${params.remote.url_env}\n")
        return 1
    dvc_cli.configure_remote(Path(args.params).resolve().parent, params.remote.name, url)
    sys.stdout.write(f"DVC remote '{params.remote.name}' -> {url}\n")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from stages.core.io import write_json
    from stages.evaluate.scorer import score_predictions

    try:
        summary, table = score_predictions(Path(args.pred), Path(args.data), args.split)
    except (FileNotFoundError, ValueError) as err:
        sys.stderr.write(f"{err}\n")
        return 1
    if args.out:
        write_json(Path(args.out), summary)
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.table, index=False)
    sys.stdout.write(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


def _profile(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    import yaml

    from stages.core.dvc_cli import format_overrides
    from stages.core.params import Params, ParamsError, load_params
    from stages.core.typed_config import build, deep_merge, to_dict

    path = Path(args.dir) / f"{args.name}.yaml"
    overrides = yaml.safe_load(path.read_text()) or {}
    nested: dict = {}
    for dotted, value in overrides.items():
        node = nested
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    try:  # every key and type checked before dvc sees it
        build(Params, deep_merge(to_dict(load_params(args.params)), nested))
    except ParamsError as err:
        sys.stderr.write(f"{path}: {err}\n")
        return 2
    sys.stdout.write(" ".join(shlex.quote(arg) for arg in format_overrides(overrides)) + "\n")
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

    lineage = sub.add_parser("lineage", help="print the lineage chain of an output (file or folder)")
    lineage.add_argument("path", help="any stage output, e.g. models/grpo or data/index/tracks.parquet")
    lineage.add_argument("--json", action="store_true", help="print the raw lineage.json record")
    lineage.set_defaults(func=_lineage)

    serve = sub.add_parser("serve", help="serve the pipeline deployment (start runs from the Prefect UI)")
    serve.add_argument("--project", default=".", help="the vrsflow checkout runs execute in")
    serve.add_argument("--name", default="vrsflow", help="deployment name")
    serve.set_defaults(func=_serve)

    remote = sub.add_parser("remote", help="configure the DVC remote from params.yaml / environment")
    remote.add_argument("--params", default="params.yaml")
    remote.set_defaults(func=_remote)

    profile = sub.add_parser("profile", help="print a params profile as `dvc exp run -S` arguments")
    profile.add_argument("name", help="profile name, e.g. revos-paper")
    profile.add_argument("--dir", default="profiles", help="folder of profiles (default: profiles)")
    profile.add_argument("--params", default="params.yaml")
    profile.set_defaults(func=_profile)

    evaluate = sub.add_parser("evaluate", help="score a VISA-layout predictions folder (<video>/<exp_id>/<frame>.png) "
                                               "against a ReVOS-layout root, as VISA's evaluator does")
    evaluate.add_argument("--pred", required=True, help="predictions folder in VISA's layout (0/255 PNGs)")
    evaluate.add_argument("--data", required=True, help="ReVOS-layout root (meta_expressions_*_.json, mask_dict*.json)")
    evaluate.add_argument("--split", default="valid", choices=["valid", "train"], help="meta file scored")
    evaluate.add_argument("--out", default="", help="write the metrics JSON here too")
    evaluate.add_argument("--table", default="", help="write the per-expression scores as CSV here")
    evaluate.set_defaults(func=_evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vrsflow` console script."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Prefect API call otherwise
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
