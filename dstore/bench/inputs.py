"""The user's input as a candidate: its row, what it holds, and whether it is lossy already.

The input's row is measured whole, as it is: its bytes on disk and the median of
``repeats`` batched reads of every record (the copy pass before them warmed the
page cache, as every cell's comparison pass warms its own). When the input
already stores values lossily (float16 or bfloat16 features, a ``round:N`` or
int8 encoding, JPEG/WebP images), every accuracy difference is measured against
what it holds, not the original it came from: :func:`lossy_note` says so, and
how to ask the question of the original.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..errors import DstoreError
from ..images.imagecodec import is_image_like
from ..model import Image
from ..model.precision import PRECISION_ATTR
from ..model.schema import Schema
from .measure import read_seconds
from .results import Cell

__all__ = ["has_images", "input_row", "lossy_note"]

#: A read of the input longer than this is not repeated (its median would cost minutes).
_LONG_READ_S = 20.0
_LOSSY_FLOATS = ("float16", "bfloat16")


def has_images(schema: Schema) -> bool:
    """Whether any field holds images (an Image kind, or uint8/uint16 tiles)."""
    return any(
        isinstance(f.kind, Image) or (f.dense and is_image_like(f))
        for s in schema.splits.values()
        for f in s.fields.values()
    )


def lossy_note(schema: Schema, reader: Any, src: str) -> str:
    """One line when the input already holds lossy values (else "")."""
    floats, images = [], []
    for split in schema.splits.values():
        lossy_images = _lossy_images(reader, split.name)
        for f in split.fields.values():
            encoded = isinstance(f.kind, Image) and f.kind.encoding in (
                "jpeg",
                "webp",
                "jxl",
                "avif",
            )
            if encoded or f.name in lossy_images:
                images.append(f.name)
            elif f.dtype.name in _LOSSY_FLOATS or PRECISION_ATTR in f.attrs:
                floats.append(f"{f.name} ({f.dtype.name})")
    if not floats and not images:
        return ""
    held = ", ".join(dict.fromkeys(floats + [f"{n} (lossy images)" for n in images]))
    return (
        f"note: {src} already stores {held}: accuracy differences are against what it holds, "
        "not the original it came from; bench that original (float32 features, PNG or raw "
        "images) to ask what the lossy step itself costs"
    )


def _lossy_images(reader: Any, split: str) -> set[str]:
    try:
        return set(reader.lossy_fields(split))
    except (AttributeError, DstoreError):
        return set()


def input_row(src: str, info: Any, repeats: int) -> Cell:
    """The first row: ``src`` as it is (its size and read time)."""
    schema = info.schema
    cell = Cell(
        info.format,
        "as is",
        {},
        images="as is",
        stored="as is",
        raw_bytes=schema.nbytes,
        records=schema.records,
        is_input=True,
        exact=True,
        bit_exact=True,
    )
    cell.bytes = info.bytes_on_disk
    try:
        runs = [read_seconds(src, info.format)]
        while len(runs) < repeats and runs[0][0] < _LONG_READ_S:
            runs.append(read_seconds(src, info.format))
        cell.read_s = statistics.median(r[0] for r in runs)
        cell.read_cpu_s = statistics.median(r[1] for r in runs)
    except DstoreError as e:
        cell.error = f"{type(e).__name__}: {e}"
    return cell
