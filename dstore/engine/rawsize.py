"""The raw (decoded) size of records whose size the schema does not fix, measured as they
are read: what a conversion's "raw" bytes and its raw/out ratio and MB/s are made of.

A field of fixed-size records is counted from its schema (:attr:`SplitSpec.nbytes`: an
encoded image of a fixed shape counts width x height x channels x itemsize); the others
-- strings, ragged lists, byte strings, encoded images of varying shape -- only as their
records pass. An encoded image is counted by the pixels its header declares, never by its
encoded bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..abc import Reader, WrappingReader
from ..model import Image, Kind, VarColumn, column_len, slice_column
from ..model.schema import Batch, SplitSpec

__all__ = ["RawMeter", "encoded_image_bytes", "measured_bytes"]

# PNG colour type -> samples per pixel (palette images decode to RGB)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
# JPEG start-of-frame markers: SOF0-SOF15 but DHT (C4), JPG (C8) and DAC (CC)
_JPEG_SOF = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _png_header(data: bytes) -> tuple[int, int, int, int] | None:
    """Width, height, channels and bytes per sample from a PNG's IHDR chunk."""
    if len(data) < 26 or data[12:16] != b"IHDR":
        return None
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    channels = _PNG_CHANNELS.get(color)
    return None if channels is None else (width, height, channels, 2 if depth == 16 else 1)


def _jpeg_header(data: bytes) -> tuple[int, int, int, int] | None:
    """Width, height, channels and bytes per sample from a JPEG's start-of-frame segment."""
    pos = 2
    while pos + 10 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # a fill byte before the marker
            pos += 1
            continue
        if marker in _JPEG_SOF:
            precision, height, width, channels = struct.unpack(">BHHB", data[pos + 4 : pos + 10])
            return width, height, channels, 2 if precision > 8 else 1
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        pos += 2 + length
    return None


def encoded_image_bytes(data: bytes, kind: Image) -> int | None:
    """The decoded size of one PNG or JPEG image, read from its header (None for another
    format, or a header that cannot be read: not known without decoding the image)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        header = _png_header(data)
    elif data[:3] == b"\xff\xd8\xff":
        header = _jpeg_header(data)
    else:
        return None
    if header is None:
        return None
    width, height, channels, itemsize = header
    # decoded to the schema's channels when it names them (0: a 2-d greyscale record)
    if kind.channels is not None:
        channels = max(1, kind.channels)
    return width * height * channels * itemsize


def measured_bytes(kind: Kind, col: Any) -> int:
    """Decoded bytes of the records in ``col``, a column of a field of ``kind``."""
    if isinstance(col, np.ndarray):
        return int(col.nbytes)
    if not isinstance(col, VarColumn):
        return 0
    if isinstance(kind, Image) and kind.encoding != "raw":
        data = np.asarray(col.values)
        total = 0
        for lo, hi in zip(col.offsets[:-1], col.offsets[1:], strict=True):
            total += encoded_image_bytes(data[lo:hi].tobytes(), kind) or 0
        return total
    values: Any = col.values
    while isinstance(values, VarColumn):  # a list of strings per record: the strings' bytes
        values = values.values
    return int(values.nbytes)


class RawMeter(WrappingReader):
    """``inner`` as it is, adding up the decoded bytes of the records of its varying-size
    fields (:attr:`SplitSpec.varying`) as batches are read: :attr:`measured`."""

    def __init__(self, inner: Reader, counted: Mapping[tuple[str, str], int] | None = None) -> None:
        super().__init__(inner)
        self.schema = inner.schema
        self.notes = inner.notes
        self.measured = 0
        self._varying = {s: set(spec.varying) for s, spec in inner.schema.splits.items()}
        # (split, field) -> records counted so far: a record read twice (the sample a
        # sharded format plans from, int8's range pass, then the write) counts once
        self._upto: dict[tuple[str, str], int] = dict(counted or {})

    def counted_from(self, split: str, start: int) -> dict[tuple[str, str], int]:
        """What a meter of the same source (opened by a worker process) starts from to
        count the records of ``split`` from ``start`` on that this one has not counted."""
        return {
            (split, name): max(start, self._upto.get((split, name), 0))
            for name in self._varying.get(split, ())
        }

    def iter_batches(self, split: str, **kwargs: Any) -> Iterator[Batch]:
        varying = self._varying.get(split, set())
        fields = self.schema.splits[split].fields
        pos = kwargs.get("start") or 0
        for batch in self.inner.iter_batches(split, **kwargs):
            n = column_len(next(iter(batch.values()))) if batch else 0
            for name in varying.intersection(batch):
                upto = self._upto.get((split, name), 0)
                if pos <= upto < pos + n:  # the records of this batch not counted yet
                    col = batch[name] if upto == pos else slice_column(batch[name], upto - pos, n)
                    self.measured += measured_bytes(fields[name].kind, col)
                    self._upto[split, name] = pos + n
            pos += n
            yield batch

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        return self.iter_batches(spec.name, fields=names, start=start, stop=stop, batch_rows=rows)
