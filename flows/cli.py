"""The `vrsflow` command line.

    vrsflow stage NAME [--params params.yaml]   run one stage's Prefect flow (what dvc.yaml calls)
    vrsflow check [--params params.yaml] [-S k=v] [--served]  validate params (and overrides) without running anything
    vrsflow repro [DVC_ARGS…]                   `dvc repro` with one Prefect API for all its stages
    vrsflow lineage PATH                        print the chain from an output back to the raw data
    vrsflow serve [--project DIR]               serve the pipeline deployment for Prefect UI runs
    vrsflow worker [--project DIR] [--pool P]   deploy the pipeline to a work pool and run its runs here (docs/team.md)
    vrsflow remote [--params params.yaml]       set the DVC remote from params / environment
    vrsflow push | pull [TARGETS…]              the same, then dvc push / pull; a failure is one line
    vrsflow profile NAME                        print `-S key=value` overrides of profiles/NAME.yaml
    vrsflow evaluate --pred DIR --data ROOT     score VISA-layout predictions against a ReVOS root
    vrsflow segment --video PATH --query TEXT   a trained checkpoint on any video: masks, overlay, answer.json
    vrsflow demo                                a small web page for the same (127.0.0.1 unless told)
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys


class UsageError(ValueError):
    """A command-line mistake: printed as one line, exit code 2."""


def stage_names() -> list[str]:
    """The stages `vrsflow stage` runs: the modules of flows/ that define a stage flow."""
    import pkgutil

    import flows

    not_stages = {"cli", "common", "forkserver", "pipeline", "prefect_api"}
    return sorted(m.name for m in pkgutil.iter_modules(flows.__path__)
                  if m.name not in not_stages and not m.name.startswith("serve_"))


def _stage(args: argparse.Namespace) -> int:
    """`vrsflow stage NAME`: the command DVC runs; with $VRSFLOW_TIMINGS set it also records when this command
    process started and ended (bench/bench_orchestration.py: what is left of a stage's wall time after the
    command ended is DVC's own bookkeeping)."""
    from flows.forkserver import FORKED_ENV

    timings = os.environ.get("VRSFLOW_TIMINGS")  # flows.common.TIMINGS_ENV (not imported: it imports prefect)
    try:
        return _run_stage_command(args)
    finally:
        if timings and os.environ.get(FORKED_ENV) != "1":  # the command itself, not the fork server's child
            import json
            import time

            import psutil

            record = {"command": "stage", "name": args.name, "item": args.item,
                      "command_start": psutil.Process().create_time(), "command_end": time.time()}
            with open(timings, "a") as out:
                out.write(json.dumps(record) + "\n")


def _run_stage_command(args: argparse.Namespace) -> int:
    from flows.forkserver import run_in_server

    if sys.argv[1:2] == ["stage"] and (code := run_in_server(sys.argv[1:])) is not None:
        return code  # ran in a child of `vrsflow repro`'s warm process (flows/forkserver.py)
    from stages.core.lifeline import stop_when_gone

    # end with what this stage serves, however it ends: `vrsflow repro` when its dvc runs the stage
    # (flows.prefect_api.REPRO_PID_ENV), else whatever started the command (a plain `dvc repro`, a shell) — a
    # `dvc repro` killed alone does not stop the stage it runs, which went on training alone; a signal to dvc's
    # whole group reaches the stage too, so the watch lets that one be handled first
    repro_pid = os.environ.get("VRSFLOW_REPRO_PID", "")
    if repro_pid.isdigit():
        stop_when_gone(int(repro_pid))
    else:
        stop_when_gone(os.getppid(), first_wait_s=3.0)
    from flows.prefect_api import prefect_api
    from stages.params import load_params

    names = stage_names()
    if args.name not in names:
        import difflib

        close = difflib.get_close_matches(args.name, names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"stages: {', '.join(names)}"
        raise UsageError(f"unknown stage '{args.name}' ({hint})")
    params = load_params(args.params)  # first of all: a bad param is one line here, not a flow run's traceback
    if args.item:  # a DVC foreach stage's item (bench --item mevis), read by the stage's flow
        os.environ["VRSFLOW_STAGE_ITEM"] = args.item
    from stages.core.output_lock import hold_outputs, stage_folders

    # the folders it writes are this run's alone (a second run: one line naming the holder), then one Prefect API
    # shared by every stage of a repro (flows/prefect_api.py)
    with hold_outputs(args.name, stage_folders(args.name, params)), prefect_api():
        from flows.serve_link import run_stage_flow

        module = importlib.import_module(f"flows.{args.name}")
        with _no_heartbeats_unless_asked():
            run_stage_flow(module.run, args.name, args.params)
    return 0


HEARTBEAT_SETTINGS = ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY")


def _no_heartbeats_unless_asked():
    """No Prefect flow-run heartbeats unless the user set their frequency.

    Heartbeats (every 180 s by default) serve only a "zombie run" automation, which a user sets up on
    purpose; and at the end of every run Prefect waits up to 1 s for the heartbeat thread to notice the stop
    — about a second per stage, a tenth of the default pipeline's orchestration. Set
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY (e.g. with such an automation) and every stage sends them.
    """
    import contextlib

    if any(name in os.environ for name in HEARTBEAT_SETTINGS):
        return contextlib.nullcontext()
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def _check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stages.params import apply_overrides, cli_overrides, read_params_file

    overrides = cli_overrides(args.set_param, UsageError)
    try:
        if args.served:  # as a run started from the UI: plus the served-run policy (flows/serve_request.py)
            from flows.serve_request import ServedPolicy, check_overrides

            check_overrides(Path(args.params), overrides, ServedPolicy(tuple(str(Path(r).resolve())
                                                                               for r in args.allow_root)))
        else:
            apply_overrides(read_params_file(args.params), overrides)
    except ValueError as err:  # ParamsError: name the file once
        message = str(err)
        raise type(err)(message if message.startswith(f"{args.params}:") else f"{args.params}: {message}") from err
    if args.stamp:  # the `check` stage's output: the same bytes whenever the params are valid
        stamp = Path(args.stamp)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text("params checked by `vrsflow check`\n")
    sys.stdout.write(f"{args.params}: ok\n")
    return 0


def _repro(args: argparse.Namespace) -> int:
    from flows.prefect_api import repro

    dvc_args = args.dvc_args[1:] if args.dvc_args[:1] == ["--"] else args.dvc_args  # `vrsflow repro -- -f sft`
    return repro(dvc_args)


def _lineage(args: argparse.Namespace) -> int:
    import json
    import os

    from stages.core.model_card import LineageNotFound, find_lineage, format_chain
    from stages.params import default_params

    try:
        path = find_lineage(args.path)
    except LineageNotFound as err:
        sys.stderr.write(f"{err}\n")
        return 1
    record = json.loads(path.read_text())
    title = f"{args.path}  (lineage: {os.path.relpath(path)})"
    text = json.dumps(record, indent=1, sort_keys=True) if args.json else format_chain(record, default_params(), title)
    sys.stdout.write(text + "\n")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from flows.pipeline import serve
    from flows.serve_auth import ServeRefused

    try:
        serve(project_dir=args.project, name=args.name, allowed_roots=tuple(args.allow_root))
    except (ServeRefused, FileNotFoundError) as err:
        raise UsageError(str(err)) from err
    return 0


def _worker(args: argparse.Namespace) -> int:
    from flows.serve_auth import ServeRefused
    from flows.serve_worker import PoolRefused, work

    try:
        work(project_dir=args.project, pool=args.pool, name=args.name, allowed_roots=tuple(args.allow_root),
             worker_name=args.worker_name or None)
    except (ServeRefused, PoolRefused, FileNotFoundError) as err:
        raise UsageError(str(err)) from err
    return 0


def _remote_params(args: argparse.Namespace):
    """(params, the remote's URL); with no URL configured, says so in one line and returns "" as the URL."""
    from stages.core import dvc_cli
    from stages.params import load_params

    params = load_params(args.params)
    url = dvc_cli.remote_url(params.remote.url, params.remote.url_env)
    if not url:
        sys.stderr.write(f"no remote: set remote.url in {args.params} or ${params.remote.url_env}\n")
    return params, url


def _remote(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stages.core import dvc_cli

    params, url = _remote_params(args)
    if not url:
        return 1
    dvc_cli.configure_remote(Path(args.params).resolve().parent, params.remote.name, url)
    sys.stdout.write(f"DVC remote '{params.remote.name}' -> {url}\n")
    return 0


def _transfer(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stages.core import dvc_cli

    params, url = _remote_params(args)
    if not url:
        return 1
    logging.getLogger(dvc_cli.__name__).setLevel(logging.WARNING)  # a failure is one line: no `$ dvc …` lines
    try:
        output = dvc_cli.transfer(Path(args.params).resolve().parent, args.command, params.remote.name, url,
                                  args.jobs, args.targets)
    except (dvc_cli.RemoteFailed, ValueError) as err:
        sys.stderr.write(f"{err}\n")
        return 1
    sys.stdout.write(output)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from stages.bench.benchmarks import evaluate_folder
    from stages.core.io import write_json

    try:
        summary, table = evaluate_folder(args.benchmark, Path(args.pred), Path(args.data), args.split,
                                         Path(args.submission) if args.submission else None, args.missing)
    except (FileNotFoundError, ValueError) as err:
        sys.stderr.write(f"{err}\n")
        return 1
    if args.out:
        write_json(Path(args.out), summary)
    if args.table and table is not None:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.table, index=False)
    sys.stdout.write(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


def _segment(args: argparse.Namespace) -> int:
    from stages.segment_video.command import run_demo, run_segment
    from stages.segment_video.source import InputError

    try:
        return (run_demo if args.command == "demo" else run_segment)(args)
    except (InputError, FileNotFoundError) as err:
        raise UsageError(str(err)) from err


def _segment_arguments(parser: argparse.ArgumentParser, demo: bool = False) -> None:
    """`vrsflow segment` / `vrsflow demo` options: model, mode, params, and each command's own."""
    parser.add_argument("--model", default="", help="Qwen2.5-VL checkpoint folder (default: the pipeline's "
                                                    "models/grpo/merged, else models/sft/merged)")
    parser.add_argument("--mode", choices=["veason", "rcot", "videoseg"], default=None,
                        help="inference: Veason-R1 (one answer), RCoT-Seg (keyframe judged, re-selected) or "
                             "VideoSeg-R1 (HTFS frame search); default: the mode the checkpoint was trained for "
                             "(its lineage), else evaluate.mode")
    parser.add_argument("--params", default="params.yaml", help="params file for the evaluate.* and sam2.* settings "
                                                                "(default: params.yaml; defaults when absent)")
    parser.add_argument("-S", "--set-param", action="append", default=[], metavar="KEY=VALUE",
                        help="a params override, e.g. -S evaluate.n_frames=8 (repeatable)")
    if demo:
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine "
                                                                 "only)")
        parser.add_argument("--port", type=int, default=7860)
        parser.add_argument("--max-mb", type=float, default=200.0, help="largest upload accepted, MB (default 200)")
        parser.add_argument("--examples", default="", help="a ReVOS-layout root whose videos are offered as "
                                                           "examples (default: data.root, else a few generated "
                                                           "synthetic clips)")
        parser.add_argument("--work", default="", help="folder for uploads and results (default: a temporary one)")
        return
    parser.add_argument("--video", default="", help="video file (mp4, mov, webm, mkv, …) or a folder of frames")
    parser.add_argument("--query", default=None, help="what to segment, in words")
    parser.add_argument("--out", default="", help="output folder (default: segment/<video name>; with --batch the "
                                                  "folder holding <video>-<hash>/<query>/ per line)")
    parser.add_argument("--batch", default="", help="JSONL file, one {\"video\": …, \"query\": …} per line; "
                                                    "resumable (done results are skipped)")


def _profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from stages.core.dvc_cli import format_overrides
    from stages.params import ParamsError, apply_overrides, read_params_file

    path = Path(args.dir) / f"{args.name}.yaml"
    overrides = yaml.safe_load(path.read_text()) or {}
    try:  # every key, type and range checked before dvc sees it (the same check as every run)
        apply_overrides(read_params_file(args.params), overrides)
    except ParamsError as err:
        sys.stderr.write(f"{path}: {err}\n")
        return 2
    # printed for `$(vrsflow profile NAME)`: the shell splits the output at whitespace and removes no quotes,
    # so values are written compactly (lists as [a,b]) and never quoted; a value with whitespace is refused
    out = [arg if arg == "-S" else arg.split("=", 1)[0] + "=" + _compact(overrides[arg.split("=", 1)[0]])
           for arg in format_overrides(overrides)]
    spaced = [a for a in out if any(c.isspace() for c in a)]
    if spaced:
        sys.stderr.write(f"{path}: {spaced[0]!r} has whitespace; `$(vrsflow profile {args.name})` would split "
                         "it — pass that value with -S yourself\n")
        return 2
    sys.stdout.write(" ".join(out) + "\n")
    return 0


def _compact(value: object) -> str:
    """A -S value as YAML that survives the shell's word splitting unquoted: flow lists without spaces or
    quotes ([sft,grpo]), true / false / null; anything else as its text."""
    import json

    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ",".join(_compact(v) for v in value) + "]"
    if isinstance(value, dict):  # the flow mapping of DVC's -S grammar (Hydra), unquoted: {name:mevis,share:1.0}
        return "{" + ",".join(f"{k}:{_compact(v)}" for k, v in value.items()) + "}"
    return str(value)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (sub-commands register here)."""
    parser = argparse.ArgumentParser(
        prog="vrsflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--debug", action="store_true", default=bool(os.environ.get("VRSFLOW_DEBUG")),
                        help="show the traceback of a params or usage error (also: VRSFLOW_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True)

    stage = sub.add_parser("stage", help="run one pipeline stage as a Prefect flow")
    stage.add_argument("name", help="stage name, e.g. synth, ingest")
    stage.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    stage.add_argument("--item", default="", help="the item of a foreach stage (bench --item mevis)")
    stage.set_defaults(func=_stage)

    check = sub.add_parser("check", help="validate params.yaml (keys, types, ranges, rules) and -S overrides",
                           description="Validate params the way every run does, before anything is deleted "
                                       "or started; exit code 2 and one line naming the key when they are wrong.")
    check.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    check.add_argument("-S", "--set-param", action="append", default=[], metavar="KEY=VALUE",
                       help="an override as `dvc exp run -S` takes it, e.g. -S sample.grpo_size=32 (repeatable)")
    check.add_argument("--stamp", default="", help="write a fixed stamp file when valid (the dvc.yaml check stage)")
    check.add_argument("--served", action="store_true", help="check -S overrides as a run started from the UI: "
                       "server-side params refused, paths inside the project (docs/ui.md, threat model)")
    check.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                       help="with --served: a folder outside the project that paths may name (as vrsflow serve's)")
    check.set_defaults(func=_check)

    repro = sub.add_parser("repro", help="`dvc repro` with one Prefect API for all its stages",
                           description="Run `dvc repro ARGS…` with one local Prefect API shared by every stage "
                                       "(or PREFECT_API_URL when set). Arguments are passed to dvc repro.")
    repro.add_argument("dvc_args", nargs=argparse.REMAINDER,
                       help="arguments for dvc repro; after `--` when the first is an option: vrsflow repro -- -f sft")
    repro.set_defaults(func=_repro)

    lineage = sub.add_parser("lineage", help="print the lineage chain of an output (file or folder)")
    lineage.add_argument("path", help="any stage output, e.g. models/grpo or data/index/tracks.parquet")
    lineage.add_argument("--json", action="store_true", help="print the raw lineage.json record")
    lineage.set_defaults(func=_lineage)

    serve = sub.add_parser("serve", help="serve the pipeline deployment (start runs from the Prefect UI)")
    serve.add_argument("--project", default=".", help="the vrsflow checkout runs execute in")
    serve.add_argument("--name", default="vrsflow", help="deployment name")
    serve.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                       help="a folder outside the project that a run's path params (data.root, model.path, …) may "
                            "name (repeatable; default: none, paths stay inside the project; docs/ui.md)")
    serve.set_defaults(func=_serve)

    worker = sub.add_parser("worker", help="deploy the pipeline to a Prefect work pool and run its runs on this "
                                           "machine (one command per GPU machine; docs/team.md)")
    worker.add_argument("--project", default=".", help="the vrsflow checkout runs execute in")
    worker.add_argument("--pool", default="vrsflow", help="work pool (type process; created when missing)")
    worker.add_argument("--name", default="vrsflow-pool", help="deployment name (vrsflow-pipeline/NAME)")
    worker.add_argument("--worker-name", default="", help="this worker's name in the UI (default: Prefect's)")
    worker.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                        help="as for vrsflow serve: a folder outside the project that a run's path params may name")
    worker.set_defaults(func=_worker)

    remote = sub.add_parser("remote", help="configure the DVC remote from params.yaml / environment")
    remote.add_argument("--params", default="params.yaml")
    remote.set_defaults(func=_remote)

    for verb in ("push", "pull"):
        transfer = sub.add_parser(verb, help=f"dvc {verb} with the remote from params.yaml / environment; a failure "
                                             "is one line naming the remote and what failed")
        transfer.add_argument("--params", default="params.yaml")
        transfer.add_argument("-j", "--jobs", type=int, default=None, help="parallel transfers (dvc's -j)")
        transfer.add_argument("targets", nargs="*", help="stages or outputs (default: every output in dvc.lock)")
        transfer.set_defaults(func=_transfer)

    profile = sub.add_parser("profile", help="print a params profile as `dvc exp run -S` arguments")
    profile.add_argument("name", help="profile name, e.g. veason-r1, rcot-seg, videoseg-r1")
    profile.add_argument("--dir", default="profiles", help="folder of profiles (default: profiles)")
    profile.add_argument("--params", default="params.yaml")
    profile.set_defaults(func=_profile)

    evaluate = sub.add_parser("evaluate", help="score a VISA-layout predictions folder (<video>/<exp_id>/<frame>.png) "
                                               "against a ReVOS-layout root, as VISA's evaluator does")
    evaluate.add_argument("--pred", required=True, help="predictions folder in VISA's layout (0/255 PNGs)")
    evaluate.add_argument("--data", required=True, help="ReVOS-layout root (meta_expressions_*_.json, mask_dict*.json)")
    evaluate.add_argument("--benchmark", default="revos",
                          choices=["revos", "mevis", "reasonvos", "refytvos", "refdavis"],
                          help="whose layout and scoring protocol (docs/benchmarks.md); server splits give a zip")
    evaluate.add_argument("--split", default="", help="benchmark split (default: its evaluation split, e.g. "
                                                      "valid, mevis valid_u)")
    evaluate.add_argument("--submission", default="", help="server splits: where the zip goes (default <pred>.zip)")
    evaluate.add_argument("--missing", default="authors", choices=["authors", "zero", "skip"],
                          help="mevis / reasonvos: an expression whose prediction video folder is missing scores 0 "
                               "(zero) or is left out (skip); authors = the dataset authors' script (mevis: zero, "
                               "reasonvos: skip); docs/benchmarks.md")
    evaluate.add_argument("--out", default="", help="write the metrics JSON here too")
    evaluate.add_argument("--table", default="", help="write the per-expression scores as CSV here")
    evaluate.set_defaults(func=_evaluate)

    segment = sub.add_parser("segment", help="a trained checkpoint on any video and query: masks/, overlay.mp4, "
                                             "answer.json (the evaluate stage's inference)")
    _segment_arguments(segment)
    segment.set_defaults(func=_segment)
    demo = sub.add_parser("demo", help="serve a small web page: upload a video, ask, see the masked video")
    _segment_arguments(demo, demo=True)
    demo.set_defaults(func=_segment)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vrsflow` console script."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Prefect API call otherwise
    args = build_parser().parse_args(argv)
    from stages.core.output_lock import OutputLocked
    from stages.params import ParamsError

    try:
        return args.func(args)
    except (ParamsError, UsageError, OutputLocked) as err:
        if args.debug:
            raise
        sys.stderr.write(f"error: {err}\n")  # one line; --debug shows the traceback
        return 2
    except Exception as err:
        from flows.prefect_api import api_unreachable

        if args.debug or (line := api_unreachable(err)) is None:
            raise
        sys.stderr.write(f"error: {line}\n")  # the API gone for longer than Prefect's client retries
        return 1


if __name__ == "__main__":
    sys.exit(main())
