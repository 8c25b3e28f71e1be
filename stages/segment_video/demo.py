"""`vrsflow demo`: a small web page over `vrsflow segment` (FastAPI + uvicorn, both already installed with
Prefect's server; no front-end framework: one HTML page with a few lines of script).

Upload a video (or pick one of the synthetic examples), type a query, and the page shows the model's
reasoning, the keyframe with its boxes and the masked video — the files `vrsflow segment` writes, made by
the same `Engine` (model and segmenter loaded once); the page names the segmenter that makes the masks
(`evaluate.segmenter`) and its checkpoint, and each result says it again. It binds to 127.0.0.1 unless told
otherwise; uploads over `max_mb` are refused with a clear message before they are stored. One request runs at a
time.
"""

from __future__ import annotations

import html
import json
import logging
import re
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

from fastapi import Request  # at module level: the routes' annotations are resolved in this module's namespace

from stages.segment_video.source import FRAME_SUFFIXES, InputError

log = logging.getLogger(__name__)

VIDEO_SUFFIXES = (".mp4", ".mov", ".webm", ".mkv", ".avi", ".m4v")
RUN_FILES = {"overlay.mp4": "video/mp4", "keyframe.png": "image/png", "strip.png": "image/png",
             "answer.json": "application/json"}
N_EXAMPLES = 4
SEGMENTER_HTML = {  # evaluate.segmenter → the page's sentence on what makes the masks
    "sam2": "SAM2 (checkpoint <code>{checkpoint}</code>) tracks it through the video from those boxes.",
    "box": "the masks are the keyframe's boxes filled on every frame (the box segmenter, "
           "<code>evaluate.segmenter: box</code>: no SAM2, no tracking; <code>-S evaluate.segmenter=sam2</code> "
           "with a SAM2 checkpoint tracks the target instead).",
}

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>vrsflow demo</title>
<style>
body {{ font-family: sans-serif; max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem; }}
fieldset {{ margin-bottom: 1rem; }} #reasoning {{ white-space: pre-wrap; background: #f4f4f4; padding: .5rem; }}
#error {{ color: #b00; }} img, video {{ max-width: 100%; }}
</style></head>
<body>
<h1>vrsflow: think before you segment</h1>
<p>Model <code>{model}</code> ({mode} mode). Upload a video (up to {max_mb:g} MB) or pick an example, ask about it,
and the model reasons, picks a keyframe and boxes the target; {segmenter}</p>
<form id="form">
<fieldset><legend>Video</legend>
<input type="file" id="file" accept="video/*"> or
<select id="example"><option value="">— an example —</option>{options}</select>
</fieldset>
<fieldset><legend>Query</legend>
<input type="text" id="query" size="70" placeholder="e.g. the object that moves fastest">
<button type="submit" id="submit">Segment</button> <span id="status"></span>
</fieldset>
</form>
<p id="error"></p>
<div id="result" hidden>
<h2>Reasoning</h2><div id="reasoning"></div>
<p id="summary"></p>
<h2>Keyframe and boxes</h2><img id="keyframe" alt="keyframe with boxes">
<h2>Masked video</h2><video id="overlay" controls muted playsinline></video>
<p><img id="strip" alt="picture strip"></p>
</div>
<script>
const MAX = {max_bytes};
const examples = {examples_json};
const $ = (id) => document.getElementById(id);
$("example").addEventListener("change", () => {{
  const ex = examples[$("example").value]; if (ex && !$("query").value) $("query").value = ex.query; }});
$("form").addEventListener("submit", async (event) => {{
  event.preventDefault();
  $("error").textContent = ""; $("status").textContent = "working…"; $("submit").disabled = true;
  try {{
    let body = {{query: $("query").value}};
    const file = $("file").files[0];
    if (file) {{
      if (file.size > MAX) throw new Error(`${{file.name}} is ${{(file.size / 1e6).toFixed(1)}} MB; ` +
                                           `this demo accepts up to {max_mb:g} MB`);
      const up = await fetch("/api/upload", {{method: "POST", body: file,
        headers: {{"Content-Type": "application/octet-stream", "X-Filename": encodeURIComponent(file.name)}}}});
      const upJson = await up.json();
      if (!up.ok) throw new Error(upJson.error || `upload refused (${{up.status}})`);
      body.upload = upJson.upload;
    }} else if ($("example").value) {{ body.example = $("example").value; }}
    const res = await fetch("/api/segment", {{method: "POST", headers: {{"Content-Type": "application/json"}},
                                              body: JSON.stringify(body)}});
    const out = await res.json(); if (!res.ok) throw new Error(out.error || `refused (${{res.status}})`);
    $("reasoning").textContent = out.reasoning || out.response || "(no reasoning)";
    const key = out.keyframe ? out.keyframe.time_s + " s" : "-";
    $("summary").textContent = `status ${{out.status}}; keyframe ${{key}}; ` +
      `mask on ${{out.frames_with_mask}} of ${{out.n_frames}} frames (${{out.segmenter}}); ` +
      `${{out.seconds.toFixed(1)}} s`;
    if (out.keyframe_url) {{ $("keyframe").src = out.keyframe_url; $("keyframe").hidden = false; }}
    else {{ $("keyframe").hidden = true; }}
    $("strip").src = out.strip_url; $("overlay").src = out.overlay_url;
    $("result").hidden = false; $("status").textContent = "done";
  }} catch (err) {{ $("error").textContent = err.message; $("status").textContent = ""; }}
  finally {{ $("submit").disabled = false; }}
}});
</script>
</body></html>
"""


def segmenter_html(segmenter: dict) -> str:
    """The page's sentence on what makes the masks, from the engine's `describe_segmenter` record."""
    template = SEGMENTER_HTML.get(segmenter["name"])
    if template is None:
        return f"the masks come from {html.escape(str(segmenter['description']))}."
    return template.format(checkpoint=html.escape(str(segmenter["checkpoint"])))


def find_examples(root: Path | None, work: Path) -> dict[str, dict]:
    """name → {"path": frames folder, "query": an expression of it}: the first videos of a ReVOS-layout root
    (its valid split first), or a few clips the synth stage renders into `work` when no root is given."""
    if root is None or not Path(root).is_dir():
        root = _render_examples(work / "examples")
    out: dict[str, dict] = {}
    for split in ("valid", "train"):
        meta_path = Path(root) / f"meta_expressions_{split}_.json"
        if not meta_path.is_file():
            continue
        videos = json.loads(meta_path.read_text()).get("videos", {})
        for video, entry in sorted(videos.items()):
            expressions = [e for e in entry.get("expressions", {}).values() if e.get("anno_id")]
            folder = Path(root) / "JPEGImages" / video
            if expressions and folder.is_dir() and len(out) < N_EXAMPLES:
                out[re.sub(r"[^A-Za-z0-9_.-]+", "_", video)] = {"path": str(folder), "query": expressions[0]["exp"]}
    return out


def _render_examples(folder: Path) -> Path:
    """A few small synthetic clips in the ReVOS layout (the synth stage's own generator)."""
    from stages.core.runner import RunnerParams
    from stages.params.synth import SynthParams, SynthScale
    from stages.synth.writer import generate_synthetic

    if not (folder / "meta_expressions_valid_.json").is_file():
        params = SynthParams(default=SynthScale(n_videos_train=1, n_videos_valid=N_EXAMPLES, min_frames=24,
                                                max_frames=32, height=240, width=320))
        generate_synthetic(params, folder, RunnerParams(kind="serial"))
    return folder


class Demo:
    """The page's state: the engine (loaded on first use), the examples, the uploads and runs folder."""

    def __init__(self, params, model: Path, mode: str | None, max_mb: float, examples: Path | None,
                 work: Path | None, engine=None) -> None:
        self.params, self.model, self.mode = params, Path(model), mode
        self.max_bytes = int(max_mb * 1_000_000)
        self.max_mb = max_mb
        self.work = Path(work) if work else Path(tempfile.mkdtemp(prefix="vrsflow-demo-"))
        (self.work / "uploads").mkdir(parents=True, exist_ok=True)
        (self.work / "runs").mkdir(parents=True, exist_ok=True)
        self.examples = find_examples(examples, self.work)
        self._engine = engine
        self._lock = threading.Lock()

    @property
    def engine(self):
        if self._engine is None:
            from stages.segment_video import Engine

            self._engine = Engine(self.params, self.model, self.mode)
        return self._engine

    def page(self) -> str:
        options = "".join(f'<option value="{html.escape(k)}">{html.escape(k)}</option>' for k in self.examples)
        examples = {k: {"query": v["query"]} for k, v in self.examples.items()}
        mode = self.mode or "checkpoint's"
        return PAGE.format(model=html.escape(str(self.model)), mode=html.escape(mode), max_mb=self.max_mb,
                           segmenter=segmenter_html(self.engine.segmenter),
                           max_bytes=self.max_bytes, options=options,
                           examples_json=json.dumps(examples).replace("</", "<\\/"))

    def too_big(self, size: int) -> str:
        return (f"the upload is {size / 1e6:.1f} MB; this demo accepts up to {self.max_mb:g} MB "
                f"(use `vrsflow segment --video FILE` for larger videos)")

    def segment(self, body: dict) -> dict:
        """Run one query; returns what the page shows. Raises InputError for bad input."""
        from stages.segment_video import Request, check_query, run_video

        if not isinstance(body, dict):
            raise InputError("expected a JSON object {query, upload | example}")
        query = check_query(body.get("query", ""), "query")
        if body.get("upload"):
            name = str(body["upload"])
            if not re.fullmatch(r"[0-9a-f]{32}(\.[a-z0-9]{1,5})?", name):
                raise InputError("unknown upload")
            video = self.work / "uploads" / name
            if not video.is_file():
                raise InputError("unknown upload (it may have expired; upload again)")
        elif body.get("example"):
            if body["example"] not in self.examples:
                raise InputError(f"unknown example {body['example']!r}")
            video = Path(self.examples[body["example"]]["path"])
        else:
            raise InputError("choose a video file or an example")
        run = uuid.uuid4().hex
        out = self.work / "runs" / run
        with self._lock:  # one model, one request at a time
            record = run_video(self.engine, video, [Request(video, query, out)], replace=True)[0]
        timings = record["timings"]
        segmenter = record["segmenter"]
        named = segmenter["name"] + (f" {segmenter['checkpoint']}" if segmenter["checkpoint"] else "")
        return {"run": run, "status": record["status"], "segmenter": named, "reasoning": record["reasoning"],
                "response": record["response"], "keyframe": record["keyframe"], "boxes": record["boxes"],
                "frames_with_mask": record["frames_with_mask"], "n_frames": record["video_info"]["n_frames"],
                "seconds": sum(v for k, v in timings.items() if k.endswith("_s")),
                "overlay_url": f"/runs/{run}/overlay.mp4", "strip_url": f"/runs/{run}/strip.png",
                "keyframe_url": f"/runs/{run}/keyframe.png" if record["keyframe"] else None,
                "answer_url": f"/runs/{run}/answer.json"}


def create_app(demo: Demo):
    """The FastAPI app: `/` (the page), `/api/upload` (raw body, size-limited while it streams),
    `/api/segment` (JSON), `/runs/<id>/<file>` (a run's outputs)."""
    from fastapi import FastAPI
    from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

    app = FastAPI(title="vrsflow demo", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return demo.page()

    @app.post("/api/upload")
    async def upload(request: Request):
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > demo.max_bytes:
            return JSONResponse({"error": demo.too_big(int(declared))}, status_code=413)
        from urllib.parse import unquote

        suffix = Path(unquote(request.headers.get("x-filename", "video.mp4"))).suffix.lower()
        if suffix not in VIDEO_SUFFIXES:
            return JSONResponse({"error": f"not a video file name ({suffix or 'no suffix'}); expected one of "
                                          f"{', '.join(VIDEO_SUFFIXES)}"}, status_code=400)
        name = uuid.uuid4().hex + suffix
        partial = demo.work / "uploads" / f".{name}.partial"
        size = 0
        with open(partial, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > demo.max_bytes:
                    out.close()
                    partial.unlink(missing_ok=True)
                    return JSONResponse({"error": demo.too_big(size)}, status_code=413)
                out.write(chunk)
        if size == 0:
            partial.unlink(missing_ok=True)
            return JSONResponse({"error": "the upload is empty"}, status_code=400)
        partial.rename(demo.work / "uploads" / name)
        return {"upload": name, "bytes": size}

    @app.post("/api/segment")
    def segment(body: dict):
        try:
            return demo.segment(body)
        except (InputError, FileNotFoundError) as err:
            return JSONResponse({"error": str(err)}, status_code=400)

    @app.get("/runs/{run}/{name}")
    def run_file(run: str, name: str):
        if not re.fullmatch(r"[0-9a-f]{32}", run) or name not in RUN_FILES:
            return JSONResponse({"error": "not found"}, status_code=404)
        path = demo.work / "runs" / run / name
        if not path.is_file():
            return JSONResponse({"error": "not found"}, status_code=404)
        return FileResponse(path, media_type=RUN_FILES[name])

    return app


def serve(params, model: Path, mode: str | None, host: str = "127.0.0.1", port: int = 7860, max_mb: float = 200.0,
          examples: Path | None = None, work: Path | None = None) -> None:
    """Serve the page until interrupted (uvicorn)."""
    import uvicorn

    demo = Demo(params, model, mode, max_mb, examples, work)
    demo.engine  # noqa: B018 - load the model and SAM2 before the first request
    log.info("vrsflow demo on http://%s:%d (model %s, uploads up to %g MB, work %s)", host, port, model, max_mb,
             demo.work)
    try:
        uvicorn.run(create_app(demo), host=host, port=port, log_level="warning")
    finally:
        if work is None:
            shutil.rmtree(demo.work, ignore_errors=True)


__all__ = ["FRAME_SUFFIXES", "Demo", "create_app", "find_examples", "serve"]
