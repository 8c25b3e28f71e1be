"""Benchmark: teacher-client throughput against a local chat-completions server with fixed latency.

Figure of merit: achieved requests/s ÷ (concurrency ÷ latency) — the ideal for a server that answers
every request after exactly `latency` seconds (target ≥ 0.9 at concurrency 32). A rerun must send 0.

    python bench/bench_teacher.py [--requests 1280] [--latency 0.25] [--concurrency 32]

Writes bench/results/teacher.json (`--out` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402
from stages.params.teacher import TeacherParams  # noqa: E402
from stages.teacher.cache import ResponseCache, request_key  # noqa: E402
from stages.teacher.client import ChatRequest, TeacherClient  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1280)
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/teacher.json")
    args = parser.parse_args()
    cache_dir = Path(tempfile.mkdtemp(prefix="vrsflow-bench-teacher-"))
    requests = [ChatRequest(key=request_key({"i": i}), messages=[{"role": "user", "content": f"q{i}"}])
                for i in range(args.requests)]
    # the server runs in its own process, as a real endpoint would (no shared GIL with the client)
    server = subprocess.Popen([sys.executable, "-m", "tests.fake_openai", "--latency", str(args.latency)],
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        base_url = server.stdout.readline().strip()
        params = TeacherParams(backend="openai", base_url=base_url, model="fake", api_key_required=False,
                               concurrency=args.concurrency, timeout_s=30.0)
        client = TeacherClient(params, ResponseCache(cache_dir))
        start = time.perf_counter()
        results = asyncio.run(client.run_all(requests))
        elapsed = time.perf_counter() - start
        rerun = TeacherClient(params, ResponseCache(cache_dir))
        asyncio.run(rerun.run_all(requests))
    finally:
        server.kill()
        shutil.rmtree(cache_dir, ignore_errors=True)
    ideal = args.concurrency / args.latency
    figures = {"requests": args.requests, "latency_s": args.latency, "concurrency": args.concurrency,
               "errors": sum(bool(r.error) for r in results), "elapsed_s": round(elapsed, 3),
               "throughput_rps": round(args.requests / elapsed, 2), "ideal_rps": ideal,
               "efficiency": round(args.requests / elapsed / ideal, 3), "sent": client.sent,
               "rerun_sent": rerun.sent,
               "target": {"efficiency": 0.9, "rerun_sent": 0},
               # the client's ~2 ms of CPU per request competes with the server and everything else here
               "load_avg_1m_after": round(os.getloadavg()[0], 2)}
    assert figures["errors"] == 0 and figures["sent"] == args.requests, figures
    write_result("teacher", figures, f"ideal: concurrency ÷ latency = {ideal:g} requests/s (every request answered "
                 f"after exactly {args.latency:g} s by a local chat-completions server in its own process)",
                 code=("stages/teacher", "stages/core", "bench/bench_teacher.py", "tests/fake_openai.py"),
                 out=args.out)


if __name__ == "__main__":
    main()
