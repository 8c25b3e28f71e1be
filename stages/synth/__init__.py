"""`synth` stage: a synthetic dataset in the exact ReVOS layout, true by construction.

Moving textured shapes (circles, squares, triangles, diamonds, stars; six colours; plain, striped or
dotted) on varied backgrounds (gradients, blocky noise, stripes, checkers). Objects enter and leave across
the frame edges, stop, speed up, overtake each other and get occluded (z order; masks are the visible
part, null when absent or fully hidden). Expressions come from the simulated trajectories and the
rendered visibility, each emitted only when its predicate picks out exactly its targets:
referring (type 0: appearance, attribute groups, position at the start / end), reasoning (type 1:
fastest / slowest, stops, speeds up, enters, leaves, shows up last, keeps moving, overtakes, passes in
front of, hidden behind at the end, ends up further left / right, largest / smallest), single- and
multi-instance, and no-target (type 2). Same seed → byte-identical files.

Modules: scene (objects, trajectories, events), render (drawing and visibility), expressions,
writer (the ReVOS files and `generate_synthetic`).
"""

from stages.synth.writer import generate_synthetic

__all__ = ["generate_synthetic"]
