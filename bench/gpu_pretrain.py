"""The pieces of bench/gpu_pretrain.sh (the GPU session's pre-training command), one subcommand each:

    python bench/gpu_pretrain.py probe --out FILE [--smoke] [--budget S]
        throughput of the `pretrain` stage (bench/smoke_pretrain.py: three seeds sharing the device, as the stage
        runs them, at a few batch sizes / loader_workers settings) and of `pretrain_sam2` (a few steps of the
        stage), each with its estimate of the full run; FILE is rewritten after each configuration.
    python bench/gpu_pretrain.py probe --out FILE --sam2-only [--smoke] [--budget S] [--set KEY=VALUE …]
        the same, `pretrain_sam2` alone (what --fit needs to size its steps), with the run's overrides (its seeds).
    python bench/gpu_pretrain.py fit --throughput FILE --seconds S [--at-most N] [--set KEY=VALUE …]
        prints the largest `pretrain_sam2.steps` (a multiple of save_every_steps, at least one) whose run fits S
        seconds at the probe's measured steps per second per seed; exit 1 when the probe has no rate.
    python bench/gpu_pretrain.py stage NAME [--root DIR] [--set KEY=VALUE …]
        the stage's flow body (flows/NAME.py without Prefect: params.yaml with the overrides that make the stage
        train — model.path / sam2.checkpoint / sam2.config pointing at the stage's out_dir — the stage's own
        function, its metrics file) with DIR as the project root; builds `tiny_models`' output there first if it
        is missing (the stage's base). Exit 0: trained; 3: up to date (out_dir's seeds.json and lineage.json were
        written with these params: nothing to do).
    python bench/gpu_pretrain.py pack --dest DIR [--root DIR] [--trained NAME …] [--file PATH …] [--reserve MIB]
        what the device call brings back, within its limits (8 files, 16 MiB each, 64 MiB in all): the files
        given, a tar per stage trained (its out_dir and metrics files) and, while a stage is unfinished, a tar of
        its resumable state (checkpoint_dir; split into parts under 16 MiB; finished seeds first, then the
        saved training states, as many as fit). Unpack with `cat DIR/NAME.tar* | tar -x` in the project root.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# the overrides under which each pre-training stage trains (else it records a skip): what the committed stage's
# params will be
TRAIN_OVERRIDES = {"model.path": "models/pretrain", "sam2.checkpoint": "models/pretrain_sam2/model.pt",
                   "sam2.config": "models/pretrain_sam2/config.yaml"}
STAGES = ("pretrain_sam2", "pretrain")
UP_TO_DATE = 3
MIB = 1 << 20
OUT_FILES, OUT_FILE_BYTES, OUT_BYTES = 8, 16 * MIB, 64 * MIB  # what a device call brings back from $OUT
PART_BYTES = OUT_FILE_BYTES - MIB  # a tar part's size, with room under the per-file limit


def stage_params(overrides: dict[str, str]):
    """params.yaml of this repository with the training overrides, then `overrides`, validated as every run is."""
    from stages.params import apply_overrides, read_params_file

    return apply_overrides(read_params_file(REPO / "params.yaml"), {**TRAIN_OVERRIDES, **overrides})[0]


def recorded_params(name: str, params) -> dict:
    """The params block(s) the stage's lineage.json records, as JSON reads them back."""
    from stages.core.typed_config import to_dict

    blocks = {"pretrain": {"pretrain": params.pretrain, "model": params.model},
              "pretrain_sam2": {"pretrain_sam2": params.pretrain_sam2}}[name]
    return json.loads(json.dumps(to_dict(blocks), sort_keys=True, default=str))


def out_dir(name: str, params) -> Path:
    return Path(getattr(params, name).out_dir)


def up_to_date(name: str, params) -> str | None:
    """Why the stage's out_dir already holds what these params train (None when it does not)."""
    out = out_dir(name, params)
    if not (out / "seeds.json").is_file() or not (out / "lineage.json").is_file():
        return None
    lineage = json.loads((out / "lineage.json").read_text())
    wanted = recorded_params(name, params)
    if lineage.get("params") != wanted:
        differ = sorted(f"{block}.{key}" for block, values in wanted.items() for key in values
                        if lineage.get("params", {}).get(block, {}).get(key) != values[key])
        print(f"gpu_pretrain: {out}/lineage.json was written with other params ({', '.join(differ)}): training "
              "again", flush=True)
        return None
    return f"{out}/seeds.json and lineage.json match these params"


def base_sha(name: str, params) -> dict:
    """The base the stage starts from, hashed as its lineage records it (to compare with the local tiny_models')."""
    from stages.core.lineage import sha256_tree

    base = Path(params.pretrain.base if name == "pretrain" else params.pretrain_sam2.base)
    return {"path": base.as_posix(), "sha256": sha256_tree(base, cache=False)}


def tiny_models_built_as(tiny_models) -> bool | str:
    """True when tiny_models' output is there and its lineage records these params (e.g. a `--set
    tiny_models.sam2_encoder_width=32`); otherwise why it must be built."""
    from stages.core.typed_config import to_dict

    lineage = Path(tiny_models.out_dir) / "lineage.json"
    if not lineage.is_file():
        return "missing"
    if json.loads(lineage.read_text()).get("params") != to_dict(tiny_models):
        return "built with other params"
    return True


def cmd_stage(args: argparse.Namespace) -> int:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    root = Path(args.root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.chdir(root)
    params = stage_params(dict(item.split("=", 1) for item in args.set))
    base = Path(params.pretrain.base if args.name == "pretrain" else params.pretrain_sam2.base)
    # the tiny_models stage's output (DVC-managed, not in git), missing or built with other params than these (e.g.
    # `--set tiny_models.sam2_encoder_width=32`): built by its own function
    built = tiny_models_built_as(params.tiny_models)
    if not base.exists() or (base.resolve().is_relative_to(Path(params.tiny_models.out_dir).resolve())
                             and built is not True):
        from stages.tiny_models import build_tiny_models

        print(f"gpu_pretrain: {params.tiny_models.out_dir} {built}: building it (tiny_models)", flush=True)
        build_tiny_models(params.tiny_models, Path(params.tiny_models.out_dir))
    print(f"gpu_pretrain: {args.name} base {json.dumps(base_sha(args.name, params))}", flush=True)
    reason = up_to_date(args.name, params)
    if reason:
        print(f"gpu_pretrain: {args.name} up to date: {reason}", flush=True)
        return UP_TO_DATE
    from stages import pretrain as vlm_stage
    from stages import pretrain_sam2 as sam2_stage

    if (vlm_stage.skipped(params.pretrain, params.model) if args.name == "pretrain"
            else sam2_stage.skipped(params.pretrain_sam2, params.sam2)):  # it would record a skip (and empty out_dir)
        print(f"gpu_pretrain: {args.name}: the overrides do not point the model at the stage's out_dir; nothing run",
              file=sys.stderr)
        return 1
    started = time.perf_counter()
    if args.name == "pretrain":  # flows/pretrain.py's body
        from stages.pretrain import pretrain

        report = pretrain(params.pretrain, params.model, params.keyframes.train_size, Path(params.pretrain.out_dir),
                          Path("metrics"))
    else:  # flows/pretrain_sam2.py's body
        from stages.pretrain_sam2 import pretrain_sam2

        report = pretrain_sam2(params.pretrain_sam2, params.sam2, Path(params.pretrain_sam2.out_dir), Path("metrics"))
    report.write_metrics(Path(f"metrics/{args.name}.json"))
    print(f"gpu_pretrain: {args.name} trained in {time.perf_counter() - started:.0f} s: "
          f"{json.dumps(report.metrics, sort_keys=True)}", flush=True)
    return 0


# --- throughput probe ---------------------------------------------------------------------------------------

# The probe's steps in order of worth (the budget may end before the last): (label, bench/smoke_pretrain.py
# arguments) of the pretrain stage, with its three seeds sharing the device as the stage runs them, in the last
# phase's scenes (6 frames, half synth: the slow ones) unless "--first-phase"; SAM2 for a few steps of its stage.
SAM2_PROBE = ("pretrain_sam2", [])
PROBES = {
    "gpu": [("as params.yaml, last phase", ["--steps", "40"]), ("as params.yaml, first phase", ["--first-phase", "40"]),
            SAM2_PROBE,
            ("loader_workers 4, last phase", ["--steps", "40", "--set", "pretrain.loader_workers=4"]),
            ("batch 64, loader_workers 4, last phase",
             ["--steps", "40", "--set", "pretrain.loader_workers=4", "--set", "pretrain.batch_size=64"])],
    "smoke": [("as params.yaml, last phase", ["--steps", "2"]), ("as params.yaml, first phase", ["--first-phase", "2"]),
              SAM2_PROBE, ("loader_workers 1, last phase", ["--steps", "2", "--set", "pretrain.loader_workers=1"])],
}
VLM_PROBE_SETS = {"gpu": ["pretrain.check_samples=8"],
                  "smoke": ["pretrain.seeds=[0]", "pretrain.batch_size=2",
                            "pretrain.check_samples=2", "pretrain.max_new_tokens=8"]}
SAM2_PROBE_SETS = {"gpu": ["pretrain_sam2.steps=10", "pretrain_sam2.warmup_steps=2", "pretrain_sam2.check_videos=1"],
                   "smoke": ["pretrain_sam2.steps=2", "pretrain_sam2.warmup_steps=1", "pretrain_sam2.check_videos=1",
                             "pretrain_sam2.clip_frames=2", "pretrain_sam2.seeds=[0]"]}


def run_bounded(argv: list[str], timeout_s: float, cwd: Path | None = None) -> tuple[int | None, str, str]:
    """(exit code or None when stopped at `timeout_s`, stdout, stderr) of `argv` in a session of its own, whose
    whole process group is stopped at the deadline (a stage's seed processes and loader workers with it)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout_s))
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=wait_s)
                return None, out, err
            except subprocess.TimeoutExpired:
                continue
        return None, "", ""


def _last_json(text: str) -> dict:
    """The JSON document a script printed last (bench/smoke_pretrain.py prints one, indented)."""
    start = text.rfind("\n{\n")
    return json.loads(text[start + 1:] if start >= 0 else text)


def estimate_pretrain(figures: dict, params) -> dict | None:
    """Seconds per seed of the full `pretrain` run (seeds in parallel, as measured) from the first- and last-phase
    throughputs at params.yaml's settings; None unless both ran."""
    first = figures.get("as params.yaml, first phase", {}).get("samples_per_s_per_seed")
    last = figures.get("as params.yaml, last phase", {}).get("samples_per_s_per_seed")
    if not first or not last:
        return None
    block = params.pretrain
    phases = block.curriculum
    seconds = sum(phase.steps * block.batch_size / (first if phase.frames == 1 else last) for phase in phases)
    return {"train_s_per_seed": round(seconds, 1), "seeds_in_parallel": len(block.seeds),
            "steps": block.steps, "batch_size": block.batch_size, "loader_workers": block.loader_workers}


def probe_sam2(mode: str, params, left, extra_sets: tuple[str, ...] = ()) -> dict:
    """A few steps of the pretrain_sam2 stage (its seeds sharing the device) in a scratch project: steps/s per seed
    and the estimate of params.yaml's run."""
    if left() < 20:
        return {"error": "not run: the probe's budget was spent"}
    with tempfile.TemporaryDirectory(prefix="gpu-pretrain-probe-") as tmp:
        argv = [sys.executable, str(Path(__file__).resolve()), "stage", "pretrain_sam2", "--root", tmp,
                *[a for item in (*extra_sets, *SAM2_PROBE_SETS[mode]) for a in ("--set", item)]]
        t0 = time.perf_counter()
        code, _, err = run_bounded(argv, left() - 3)
        wall = round(time.perf_counter() - t0, 1)
        if code != 0:
            tail = (err.strip().splitlines() or ["(no output)"])[-1]
            return {"error": "stopped at the probe's budget" if code is None else tail, "wall_s": wall}
        seeds = json.loads((Path(tmp) / "models" / "pretrain_sam2" / "seeds.json").read_text())["seeds"]
    rate = min(s["steps_per_s"] for s in seeds.values())
    steps = params.pretrain_sam2.steps
    probe_steps = next(iter(seeds.values()))["steps"]
    return {"seeds": len(seeds), "steps": probe_steps, "wall_s": wall,
            # the run's cost besides its steps (processes' start-up, the two one-clip checks, saving)
            "fixed_s": round(max(0.0, wall - probe_steps / rate), 1) if rate else None,
            "steps_per_s_per_seed": rate, "device": next(iter(seeds.values()))["device"],
            "estimate": {"train_s_per_seed": round(steps / rate, 1) if rate else None, "steps": steps,
                         "seeds_in_parallel": len(params.pretrain_sam2.seeds)}}


def cmd_probe(args: argparse.Namespace) -> int:
    from bench.results_io import write_result

    mode = "smoke" if args.smoke else "gpu"
    started = time.monotonic()
    figures: dict = {"pretrain": {}, "pretrain_sam2": {}}
    params = stage_params(dict(item.split("=", 1) for item in args.set))

    def left() -> float:
        return args.budget - (time.monotonic() - started)

    def write() -> None:
        figures["estimate"] = {"pretrain": estimate_pretrain(figures["pretrain"], params),
                               "pretrain_sam2": figures["pretrain_sam2"].get("estimate")}
        with contextlib.redirect_stdout(io.StringIO()):  # write_result prints the whole record
            write_result(Path(args.out).stem, figures, "none (absolute throughput of the pre-training stages on this "
                         "device, to size the real run)", out=Path(args.out))

    sets = [a for item in VLM_PROBE_SETS[mode] for a in ("--set", item)]
    for label, extra in ([SAM2_PROBE] if args.sam2_only else PROBES[mode]):
        if label == SAM2_PROBE[0]:
            figures["pretrain_sam2"] = probe_sam2(mode, params, left, tuple(args.set))
            print(f"gpu_pretrain: probe pretrain_sam2 {json.dumps(figures['pretrain_sam2'])}", flush=True)
            write()
            continue
        if left() < 15:
            figures["pretrain"][label] = {"error": "not run: the probe's budget was spent"}
            continue
        if extra[0] == "--first-phase":  # the first phase's scenes: a one-phase curriculum of them
            first = params.pretrain.curriculum[0]
            phase = (f"[{{steps:{extra[1]},frames:{first.frames},synth_share:{first.synth_share},"
                     f"move:{first.move},grow_every:{first.grow_every}}}]")
            extra = ["--set", f"pretrain.steps={extra[1]}", "--set", f"pretrain.curriculum={phase}"]
        argv = [sys.executable, str(REPO / "bench" / "smoke_pretrain.py"), *sets, *extra]
        t0 = time.perf_counter()
        code, out, err = run_bounded(argv, left() - 5)
        wall = round(time.perf_counter() - t0, 1)
        if code != 0:
            tail = (err.strip().splitlines() or ["(no output)"])[-1]
            figures["pretrain"][label] = {"error": "stopped at the probe's budget" if code is None else tail,
                                          "wall_s": wall}
        else:
            seeds = _last_json(out)["seeds"]["seeds"]
            rates = [s["samples_per_s"] for s in seeds.values()]
            figures["pretrain"][label] = {
                "seeds": len(seeds), "steps": next(iter(seeds.values()))["steps"],
                "batch_size": next(iter(seeds.values()))["batch_size"], "wall_s": wall,
                "samples_per_s_per_seed": round(min(rates), 2), "samples_per_s_all_seeds": round(sum(rates), 2),
                "device": next(iter(seeds.values()))["device"], "args": extra}
        print(f"gpu_pretrain: probe pretrain [{label}] {json.dumps(figures['pretrain'][label])}", flush=True)
        write()
    print(f"gpu_pretrain: probe written to {args.out}; estimates {json.dumps(figures['estimate'])}", flush=True)
    failed = [k for k, v in figures["pretrain"].items() if "error" in v] + (
        ["pretrain_sam2"] if "error" in figures["pretrain_sam2"] else [])
    return 1 if failed else 0


# Seconds of a pretrain_sam2 run that are not its training steps (processes' start-up, the base's and each trained
# seed's held-out tracking check, saving): at least this, else twice what the probe spent besides its steps (its
# checks track one clip, the run's check_videos: on the H200 that was about 60 s of an 82 s probe)
SAM2_FIXED_S = 50.0


def fit_sam2_steps(steps_per_s: float, seconds: float, params, probe_fixed_s: float | None = None) -> int:
    """The largest multiple of save_every_steps whose training fits `seconds`, less the run's other costs
    (SAM2_FIXED_S, or twice the probe's `probe_fixed_s` where larger), at `steps_per_s` per seed (the seeds side
    by side, as the probe measured them); at least one save interval."""
    block = params.pretrain_sam2
    every = block.save_every_steps
    fixed = max(SAM2_FIXED_S, 2 * (probe_fixed_s or 0.0))
    fits = int(steps_per_s * max(0.0, seconds - fixed) * 0.9)  # 10 % margin: the probe is short
    return max(every, fits // every * every)


def cmd_fit(args: argparse.Namespace) -> int:
    params = stage_params(dict(item.split("=", 1) for item in args.set))
    probe = json.loads(Path(args.throughput).read_text()).get("figures", {}).get("pretrain_sam2", {})
    rate = probe.get("steps_per_s_per_seed")
    if not rate:
        print(f"gpu_pretrain: fit: {args.throughput} has no pretrain_sam2 steps_per_s_per_seed "
              f"({probe.get('error', 'not probed')})", file=sys.stderr)
        return 1
    steps = fit_sam2_steps(float(rate), args.seconds, params, probe.get("fixed_s"))
    if args.at_most:
        steps = min(steps, args.at_most)
    print(f"gpu_pretrain: fit: {rate} steps/s per seed, {probe.get('fixed_s')} s besides steps in the probe, "
          f"{args.seconds:.0f} s -> pretrain_sam2.steps={steps}",
          file=sys.stderr)
    print(steps)
    return 0


# --- what comes back from the device call -------------------------------------------------------------------

def _members(path: Path) -> list[Path]:
    """Files under `path` (or `path` itself), sorted, without partial writes."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.endswith(".partial"))


def checkpoint_units(checkpoint_dir: Path) -> list[tuple[str, list[Path]]]:
    """A checkpoint folder's pieces in the order they are worth bringing back: each finished seed (its figures,
    bf16 model, curve: the stage keeps it and does not train it again), then each seed's saved training state."""
    finished, states = [], []
    for seed_dir in sorted(p for p in checkpoint_dir.glob("seed-*") if p.is_dir()):
        files = _members(seed_dir)
        if (seed_dir / "result.json").is_file():
            finished.append((f"{seed_dir} (finished)", [f for f in files if f.name != "state.pt"]))
        elif (seed_dir / "state.pt").is_file():
            states.append((f"{seed_dir} (state)", [seed_dir / "state.pt"]))
    return finished + states


def write_tar(dest: Path, name: str, files: list[Path], root: Path) -> list[Path]:
    """`files` (relative to `root`) as dest/name, split into parts of PART_BYTES (name.00, name.01, …) when
    larger; returns the files written."""
    whole = dest / name
    with tarfile.open(whole, "w") as tar:
        for path in files:
            tar.add(path, arcname=_relative(path, root))
    if whole.stat().st_size <= PART_BYTES:
        return [whole]
    parts = []
    with whole.open("rb") as src:
        while chunk := src.read(PART_BYTES):
            part = dest / f"{name}.{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append(part)
    whole.unlink()
    return parts


def _relative(path: Path, root: Path) -> str:
    return (path.relative_to(root) if path.is_absolute() else path).as_posix()


def _tar_size(files: list[Path]) -> int:
    return sum(512 + (p.stat().st_size + 511) // 512 * 512 for p in files) + 10240


def cmd_pack(args: argparse.Namespace) -> int:
    root, dest = Path(args.root).resolve(), Path(args.dest).resolve()
    given = [Path(path).resolve() for path in args.file]  # relative to where the command was given
    dest.mkdir(parents=True, exist_ok=True)
    os.chdir(root)
    params = stage_params({})
    files_left = OUT_FILES - len([p for p in dest.iterdir() if p.is_file()])
    bytes_left = OUT_BYTES - sum(p.stat().st_size for p in dest.iterdir() if p.is_file()) - args.reserve * MIB
    left_out = []

    def take(name: str, files: list[Path]) -> bool:
        nonlocal files_left, bytes_left
        size = _tar_size(files)
        n_parts = max(1, -(-size // PART_BYTES))
        if not files or n_parts > files_left or size > bytes_left:
            return False
        written = write_tar(dest, name, files, root)
        files_left -= len(written)
        bytes_left -= sum(p.stat().st_size for p in written)
        folders = sorted({"/".join(_relative(f, root).split("/")[:2]) for f in files})
        print(f"gpu_pretrain: pack {', '.join(p.name for p in written)} ({size / MIB:.1f} MiB): {', '.join(folders)}",
              flush=True)
        return True

    for src in given:
        if src.is_file() and files_left > 0 and src.stat().st_size <= min(bytes_left, OUT_FILE_BYTES):
            (dest / src.name).write_bytes(src.read_bytes())
            files_left -= 1
            bytes_left -= src.stat().st_size
        elif src.is_file():
            left_out.append(str(src))
    for name in args.trained:  # a finished stage: its out_dir and metrics files, for the lead to commit
        block = getattr(params, name)
        files = [*_members(Path(block.out_dir)), *_members(Path("metrics") / f"{name}.json"),
                 *_members(Path("metrics") / f"{name}_curve.tsv")]
        if not take(f"{name}.tar", files):
            left_out.append(f"{block.out_dir} (over what comes back)")
    units = []  # the unfinished stages' resumable state
    for name in STAGES:
        checkpoint_dir = Path(getattr(params, name).checkpoint_dir)
        if checkpoint_dir.is_dir():
            units += checkpoint_units(checkpoint_dir)
    chosen = []
    for label, files in units:  # greedy in order of worth, as long as the one tar still fits
        if _tar_size([*chosen, *files]) <= min(bytes_left, files_left * PART_BYTES):
            chosen += files
        else:
            left_out.append(label)
    if chosen and not take("checkpoints.tar", chosen):
        left_out.append("checkpoints")
    for item in left_out:
        print(f"gpu_pretrain: pack: left out {item}: it stays on this machine only (a warm machine's next call "
              "resumes from it)", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    probe = sub.add_parser("probe", help="throughput of both pre-training stages")
    probe.add_argument("--out", required=True, help="the results file")
    probe.add_argument("--smoke", action="store_true", help="tiny sizes (CPU)")
    probe.add_argument("--budget", type=float, default=90.0, help="seconds for the whole probe")
    probe.add_argument("--sam2-only", action="store_true", help="probe pretrain_sam2 alone")
    probe.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="a params override of the SAM2 probe (its steps and checks stay the probe's own)")
    fit = sub.add_parser("fit", help="pretrain_sam2's steps for the seconds left")
    fit.add_argument("--throughput", required=True, help="the probe's results file")
    fit.add_argument("--seconds", type=float, required=True, help="seconds the stage may run")
    fit.add_argument("--at-most", type=int, default=0, help="steps at most (the smoke run's few)")
    fit.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a params override")
    stage = sub.add_parser("stage", help="one pre-training stage's flow body")
    stage.add_argument("name", choices=STAGES)
    stage.add_argument("--root", default=".", help="the project root it runs in (default: here)")
    stage.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a params override")
    pack = sub.add_parser("pack", help="what the device call brings back")
    pack.add_argument("--dest", required=True, help="the folder brought back ($OUT)")
    pack.add_argument("--root", default=".", help="the project root the stages ran in")
    pack.add_argument("--trained", nargs="*", default=[], choices=STAGES, help="stages trained by this call")
    pack.add_argument("--file", nargs="*", default=[], help="files to copy as they are (first)")
    pack.add_argument("--reserve", type=int, default=2, help="MiB kept free for a log still being written")
    args = parser.parse_args(argv)
    bad = [item for item in getattr(args, "set", []) if "=" not in item]
    if bad:
        parser.error(f"--set: '{bad[0]}' is not KEY=VALUE")
    return {"probe": cmd_probe, "stage": cmd_stage, "pack": cmd_pack, "fit": cmd_fit}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
