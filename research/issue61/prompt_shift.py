"""Study (issue 61): is a tiny base's box read from *where the answer stands* rather than from what the words name?

    python research/issue61/prompt_shift.py BASE STATE OUT.json

With `pretrain.rope_theta` 3 every rope frequency pair turns 0.35-1 rad per position (decision 006), so an answer
token's attention score to an image token depends on the exact distance between them, which the question's length
sets. A model that learnt to box from a fixed distance loses its boxes when the question is a token longer. This loads
a shapes probe's saved state (`probe_describe.py SCENE=shapes`, OBJ shapes per scene from the environment, default 1)
and answers the probe's 96 held-out samples (greedy, the stage's `score_answer`) with the expression as trained
("the red star") and with it lengthened by one, two and four words that name nothing ("the red star here", …): the
same frames, target and box, only the answer's distance from the image changes. It also splits the as-trained
figures by the expression's token count (`star` is one token more than the other kinds).
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("SCENE", "shapes")
os.environ.setdefault("OBJ", "1")
ARGS, sys.argv = sys.argv, ["probe"]
import research.issue61.probe_describe as pd  # noqa: E402
from stages.core.io import derive_seed  # noqa: E402
from stages.params import load_params  # noqa: E402
from stages.pretrain import fresh_model  # noqa: E402

SUFFIXES = {"as trained": "", "+1 word": " here", "+2 words": " right here", "+4 words": " over right here now"}


def main() -> None:
    base, state_path, out = ARGS[1], Path(ARGS[2]), Path(ARGS[3])
    torch.set_num_threads(1)
    params = dataclasses.replace(load_params("params.yaml").pretrain, base=base)
    model, processor = fresh_model(params)
    state = torch.load(state_path, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    held = [pd.sample(np.random.default_rng(derive_seed(7, "describe", "check", i)), f"check/{i}") for i in
            range(pd.CHECK)]
    tokens = [len(processor.tokenizer(s.expression)["input_ids"]) for s, _ in held]
    rows = {}
    for name, suffix in SUFFIXES.items():
        shifted = [(dataclasses.replace(s, expression=s.expression + suffix), r) for s, r in held]
        rows[name] = pd.check(model, processor, shifted)
        rows[name].pop("last_answer")
        print(name, json.dumps(rows[name]), flush=True)
    by_length = {}
    for n in sorted(set(tokens)):
        part = [h for h, t in zip(held, tokens, strict=True) if t == n]
        figures = pd.check(model, processor, part)
        figures.pop("last_answer")
        by_length[f"{n} tokens ({len(part)} samples)"] = figures
    out.write_text(json.dumps({"what": __doc__.split("\n")[0], "state_step": int(state["step"]),
                               "objects": pd.OBJ, "command": "python research/issue61/prompt_shift.py BASE STATE OUT",
                               "by_suffix": rows, "as_trained_by_expression_tokens": by_length}, indent=1) + "\n")


if __name__ == "__main__":
    main()
