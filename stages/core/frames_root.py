"""Where the frames of every indexed video are: `data.root`, or with several training sources a folder of links.

Shared by ingest and by every stage that opens frames (cot, difficulty, shard), so that none of them imports
another stage's module (docs/sampling.md, "Training sources").
"""

from __future__ import annotations

import os
from pathlib import Path

from stages.core.params import DataParams, SourceParams

__all__ = ["ROOT_SOURCE", "FramesRootError", "frames_dir_of", "frames_root", "source_of"]

ROOT_SOURCE = "root"  # the source of data.root's (unqualified) rows


class FramesRootError(ValueError):
    """The links folder cannot be built: the message names the source or the path and what is wrong."""


def source_of(video: str, sources: tuple[str, ...] | list[str]) -> str:
    """The source of an indexed video key: `<name>/…` for a training source named in `sources` (ingest
    qualifies their keys so), else data.root's ("root"; a source may not share a name with a top-level frame
    folder of data.root, `frames_root` refuses it)."""
    head = video.split("/", 1)[0]
    return head if head in sources else ROOT_SOURCE


def frames_dir_of(source: SourceParams) -> Path:
    """The folder holding `<video>/<frame>.jpg` of a source's split, as published."""
    root = Path(source.root)
    return root / "JPEGImages" if source.layout == "revos" else root / source.split / "JPEGImages"


def frames_root(data: DataParams) -> Path:
    """The root whose `JPEGImages/<video>/<frame>.jpg` holds every indexed video's frames.

    Without sources: `data.root`. With sources: `data.frames_dir`, (re)built here as symbolic links — one per
    source (`JPEGImages/<name>` → its frame folder) and one per top-level folder of `data.root/JPEGImages` (the
    evaluation videos). Only links are ever created or removed there.

    Raises:
        FramesRootError: a source name equals a top-level frame folder of data.root, or frames_dir holds a
            non-link entry where a link must go.
    """
    if not data.sources:
        return Path(data.root)
    links: dict[str, Path] = {}
    root_frames = Path(data.root) / "JPEGImages"
    if root_frames.is_dir():
        for entry in sorted(root_frames.iterdir()):
            links[entry.name] = entry.resolve()
    for i, source in enumerate(data.sources):
        if source.name in links:
            raise FramesRootError(f"data.sources[{i}] ({source.name}): the name is also a frame folder of data.root "
                              f"({root_frames / source.name}); rename the source")
        links[source.name] = frames_dir_of(source).resolve()
    folder = Path(data.frames_dir) / "JPEGImages"
    folder.mkdir(parents=True, exist_ok=True)
    # relative links: the project folder can move (or be a scratch clone) with its data
    targets = {name: os.path.relpath(target, folder.resolve()) for name, target in links.items()}
    for entry in folder.iterdir():
        if entry.is_symlink() and (entry.name not in targets or os.readlink(entry) != targets[entry.name]):
            entry.unlink()
    for name, target in targets.items():
        link = folder / name
        if link.is_symlink():
            continue
        if link.exists():
            raise FramesRootError(f"{link}: data.frames_dir must hold only links, found a real file or folder")
        link.symlink_to(target, target_is_directory=True)
    return Path(data.frames_dir)
