"""evaluate.kv_cache: a static KV cache set through the model's generation config answers what the dynamic
cache answers (greedy, the committed tiny base), batched queries that share a prefix keep that prefix's cache, and
the switch reads one line on a bad value. (On CUDA transformers also compiles the decode step: the GPU bench.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from stages.evaluate.infer import Query, answer_queries, use_static_cache
from stages.models import load_vlm

BASE = Path(__file__).resolve().parents[2] / "models" / "pretrain"  # committed (frozen stage), fp32 on the CPU


@pytest.fixture(scope="module")
def queries() -> list[Query]:
    rng = np.random.default_rng(3)
    frames = [Image.fromarray(rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)) for _ in range(3)]
    return [Query("a", "the red one", [0, 2, 4], frames), Query("b", "the object on the left", [0, 2, 4], frames)]


def test_a_static_cache_answers_what_the_dynamic_one_answers(queries: list[Query]) -> None:
    vlm, processor = load_vlm(str(BASE), "float32")
    alone = [answer_queries(vlm, processor, [q], 40, 1)[0].response for q in queries]
    batched = [r.response for r in answer_queries(vlm, processor, queries, 40, 2)]  # one prefix run for both
    assert vlm.generation_config.cache_implementation is None
    assert use_static_cache(vlm, "static") and vlm.generation_config.cache_implementation == "static"
    assert [answer_queries(vlm, processor, [q], 40, 1)[0].response for q in queries] == alone
    # the shared prefix's filled cache is handed over and the static setting yields to it (transformers refuses
    # both): same answers as before
    assert [r.response for r in answer_queries(vlm, processor, queries, 40, 2)] == batched
    assert all(len(text) > 20 for text in alone)  # real answers were compared, not two empty strings


def test_auto_is_off_without_cuda_and_a_bad_value_is_one_line() -> None:
    class Config:
        cache_implementation = None

    class Model:
        generation_config = Config()

    model = Model()
    import torch

    assert use_static_cache(model, "auto") is torch.cuda.is_available()  # on only where transformers compiles it
    model.generation_config.cache_implementation = None
    assert use_static_cache(model, "dynamic") is False
    assert model.generation_config.cache_implementation is None
    with pytest.raises(ValueError, match=r"evaluate.kv_cache: expected one of \['dynamic', 'static', 'auto'\], got"):
        use_static_cache(model, "yes")
