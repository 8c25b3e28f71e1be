"""A video the user gives `vrsflow segment`: a video file (decoded once with PyAV, its frames streamed to a
folder on disk as they are decoded) or a folder of frames (read in place). Either way the result is a
sequence of RGB frames that reads a frame from disk when indexed, so nothing grows with the video's length.

Every problem is an `InputError`: one line naming the file and what is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")
JPEG_QUALITY = 95  # decoded frames kept on disk as JPEGs (as ReVOS keeps its frames)


class InputError(ValueError):
    """Bad input for `vrsflow segment` / `vrsflow demo`: printed as one line, non-zero exit."""


@dataclass
class FrameSource:
    """Frames on disk, read when indexed (a `Sequence[np.ndarray]` for evaluate's and SAM2's code).

    `names` are the frame names (mask file names: `masks/<name>.png`), `times` the seconds of each frame
    (None when the input is a folder of frames).
    """

    source: Path
    paths: list[Path]
    names: list[str]
    height: int
    width: int
    fps: float | None = None
    times: list[float] | None = None
    kind: str = "folder"  # folder | video
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, t: int) -> np.ndarray:
        if not isinstance(t, int | np.integer):
            raise TypeError(f"frame index must be an int, got {type(t).__name__}")
        path = self.paths[int(t)]
        try:
            with Image.open(path) as img:
                frame = np.asarray(img.convert("RGB"))
        except (OSError, UnidentifiedImageError) as err:
            raise InputError(f"{path}: unreadable frame ({err})") from err
        if frame.shape[:2] != (self.height, self.width):
            raise InputError(f"{path}: frame is {frame.shape[1]}x{frame.shape[0]}, the first frame "
                             f"{self.width}x{self.height} (all frames must have one size)")
        return frame

    def __iter__(self):
        return (self[t] for t in range(len(self)))

    def time_of(self, t: int) -> float:
        """Seconds of frame t (its position when the input has no clock)."""
        return float(self.times[t]) if self.times is not None else float(t)


def open_frames(path: Path, work: Path, progress: Callable[[int], None] | None = None) -> FrameSource:
    """The frames of `path`: a folder of frames read in place, or a video file decoded into `work`.

    Raises:
        InputError: missing path, no frames, frames of different sizes, unreadable / truncated file, no video
            stream.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_dir():
        return _folder(path, progress)
    return decode_video(path, work, progress)


def probe(path: Path) -> None:
    """Check quickly that `path` can be segmented (before a model is loaded): a folder's frame headers, or a
    video file that opens, has a video stream and decodes a first frame. Truncation shows only when decoding.

    Raises:
        InputError: as `open_frames`.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_dir():
        _folder(path, None)
        return
    import av

    container = _open(path)
    with container:
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams}) or ["none"]
            raise InputError(f"{path}: no video stream (streams: {', '.join(kinds)})")
        try:
            first = next(iter(container.decode(container.streams.video[0])), None)
        except av.error.FFmpegError as err:
            raise InputError(f"{path}: truncated or corrupt video, no frame decodes ({_reason(err)})") from err
        if first is None:
            raise InputError(f"{path}: the video stream has no frames")


def _folder(folder: Path, progress: Callable[[int], None] | None) -> FrameSource:
    paths = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in FRAME_SUFFIXES)
    if not paths:
        raise InputError(f"{folder}: no frames ({', '.join(FRAME_SUFFIXES)} files) in this folder")
    sizes: dict[tuple[int, int], Path] = {}
    for path in paths:  # headers only: cheap, and a bad frame is found before anything is written
        try:
            with Image.open(path) as img:
                sizes.setdefault(img.size, path)
        except (OSError, UnidentifiedImageError) as err:
            raise InputError(f"{path}: unreadable frame ({err})") from err
        if progress:
            progress(1)
    if len(sizes) > 1:
        (a, pa), (b, pb) = list(sizes.items())[:2]
        raise InputError(f"{folder}: frames of different sizes ({pa.name} is {a[0]}x{a[1]}, {pb.name} is "
                         f"{b[0]}x{b[1]}); all frames must have one size")
    width, height = next(iter(sizes))
    return FrameSource(folder, paths, [p.stem for p in paths], height, width)


def decode_video(path: Path, work: Path, progress: Callable[[int], None] | None = None) -> FrameSource:
    """Decode every frame of a video file once (PyAV) into `work/frames/<00000>.jpg`, as it is decoded.

    Raises:
        InputError: unreadable or truncated file, no video stream, zero frames, frames changing size.
    """
    import av

    container = _open(path)
    folder = Path(work) / "frames"
    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    times: list[float] = []
    size: tuple[int, int] | None = None
    with container:
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams}) or ["none"]
            raise InputError(f"{path}: no video stream (streams: {', '.join(kinds)})")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        expected = int(stream.frames or 0)
        rate = stream.average_rate or stream.guessed_rate
        fps = float(rate) if rate else None
        try:
            for frame in container.decode(stream):
                image = frame.to_image()  # RGB
                if size is None:
                    size = image.size
                elif image.size != size:
                    raise InputError(f"{path}: frame {len(paths)} is {image.size[0]}x{image.size[1]}, the first "
                                     f"{size[0]}x{size[1]} (a stream that changes size is not supported)")
                out = folder / f"{len(paths):05d}.jpg"
                image.save(out, quality=JPEG_QUALITY)
                paths.append(out)
                times.append(float(frame.time) if frame.time is not None else
                             len(times) / fps if fps else float(len(times)))
                if progress:
                    progress(1)
        except av.error.FFmpegError as err:
            raise InputError(f"{path}: truncated or corrupt video, decoding stopped at frame {len(paths)} "
                             f"({_reason(err)})") from err
    if not paths:
        raise InputError(f"{path}: the video stream has no frames")
    if expected and len(paths) < expected * 0.98 - 1:  # the container promised more: cut off
        raise InputError(f"{path}: truncated video: {len(paths)} frames decoded of the {expected} its header lists")
    width, height = size
    if times and not all(math.isfinite(t) for t in times):
        times = [t / fps if fps else float(t) for t in range(len(paths))]
    return FrameSource(Path(path), paths, [p.stem for p in paths], height, width, fps, times, kind="video",
                       extra={"codec": stream.codec_context.name, "header_frames": expected})


def _open(path: Path):
    import av

    try:
        return av.open(str(path))
    except av.error.EOFError as err:  # a header and nothing after it
        raise InputError(f"{path}: no frames (the file ends before any video data)") from err
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not a readable video file ({_reason(err)})") from err


def _reason(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text[:160]
