"""Study (issue 61): the default evaluation's ceiling (ground-truth answers through the committed SAM2) when the
default synth is drawn otherwise — plainer, larger, fewer objects — before any of it is made the default.

    python research/issue61/ceiling_by_look.py COPY OUT.json LOOK:SCALE:MAX_OBJECTS [...]

COPY is a clone of the project (its own folder: its params.yaml is rewritten). For each LOOK:SCALE:MAX_OBJECTS it
sets `synth.default.look`, `object_scale` and `max_objects` in COPY's params.yaml (DVC's own YAML writer), runs
`dvc repro keyframes` there and scores the eval pool with the ground-truth answer as the policy through the SAM2
params.yaml names (`bench.bench_learning.ceiling`, the evaluate stage's own code). The committed SAM2 was trained on
the textured look at scale 1: a look it tracks worse lowers the ceiling every figure is read against (issue 61 asks
for a ceiling of at least 40).
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from dvc.utils.serialize import modify_yaml

from bench.bench_learning import ceiling
from stages.params import load_params


def main() -> None:
    copy, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
    rows = []
    for spec in sys.argv[3:]:
        look, scale, max_objects = spec.split(":")
        with modify_yaml(copy / "params.yaml") as params:
            params["synth"]["default"].update(look=look, object_scale=float(scale), max_objects=int(max_objects))
        subprocess.run(["dvc", "repro", "keyframes"], cwd=copy, check=True, capture_output=True)
        with tempfile.TemporaryDirectory() as tmp:
            figures = ceiling(load_params(copy / "params.yaml"), copy, "sam2", Path(tmp))
        rows.append({"look": look, "object_scale": float(scale), "max_objects": int(max_objects), **figures})
        print(json.dumps(rows[-1]), flush=True)
    out.write_text(json.dumps({"what": __doc__.split("\n")[0], "command": " ".join(["python", *sys.argv[:1], "COPY",
                                                                                   *sys.argv[2:]]),
                               "ceilings": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
