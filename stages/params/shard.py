"""`shard`: the WebDataset shards and the trainer exports."""

from __future__ import annotations

from dataclasses import dataclass

from stages.core.params import JpegQuality, PosInt
from stages.core.typed_config import Exp


@dataclass(frozen=True)
class ShardParams:
    samples_per_shard: Exp[PosInt] = 256  # WebDataset samples per tar
    jpeg_quality: Exp[JpegQuality] = 95  # frames re-encoded at train size
    export_sharegpt: Exp[bool] = True  # LLaMA-Factory ShareGPT JSON + images (SFT)
    export_verl: Exp[bool] = True  # verl parquet (GRPO, eval)
