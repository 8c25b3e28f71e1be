"""`synth` stage: a synthetic dataset in the exact ReVOS layout, true by construction.

Moving textured shapes (several kinds and colours) on varied backgrounds; objects enter, leave, stop,
speed up and get occluded. Referring (type 0), reasoning (type 1) and no-target (type 2) expressions,
single- and multi-instance, are generated from the simulated trajectories, so each one is true of its
video. Same seed → byte-identical files.
"""

from stages.synth.writer import generate_synthetic

__all__ = ["generate_synthetic"]
