"""`tiny_models`: the random tiny Qwen2.5-VL and SAM2 the default run starts from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from stages.core.params import PosInt, Seed
from stages.core.typed_config import Exp, ExpPath

# the tiny SAM2's image encoder widths (stages.tiny_models.tiny_sam2): 32 is the widest whose weights stay under the
# 16 MiB a committed file may take in bf16 (48: 16.5 MiB)
Sam2EncoderWidth = Literal[16, 32]


@dataclass(frozen=True)
class TinyModelsParams:
    seed: Exp[Seed] = 0
    out_dir: ExpPath[str] = "models/tiny"  # qwen25vl/ and sam2/ are written below it
    vocab_size: Exp[PosInt] = 1024  # toy byte-level BPE (a small vocabulary keeps GRPO log-probs cheap on CPU)
    # text hidden size (head_dim = hidden_size / num_heads); 256 learns the format in SFT
    hidden_size: Exp[PosInt] = 256
    num_layers: Exp[PosInt] = 2
    num_heads: Exp[PosInt] = 4
    max_image_side: Exp[PosInt] = 112  # processor's longest_edge in pixels (28-pixel multiples)
    sam2_image_size: Exp[PosInt] = 256  # SAM2 input resolution of the micro model
    # the micro SAM2's image encoder width (stages.tiny_models.tiny_sam2.ENCODER_WIDTHS: 32 is the widest whose weights
    # stay under 16 MiB in bf16)
    sam2_encoder_width: Exp[Sam2EncoderWidth] = 16

    def _rules(self) -> Iterator[tuple[str, str]]:
        if self.hidden_size % self.num_heads:
            yield "hidden_size", f"must be a multiple of num_heads ({self.num_heads}), got {self.hidden_size}"
