"""Per-shard record indexes: ``<shard>.idx`` sidecars, one line per record.

The format is the one NVIDIA DALI's ``tfrecord2idx`` writes and DALI and the
``tfrecord`` package read: ASCII lines ``"<offset> <length>\\n"``, the byte
offset where a record's frame starts in the shard and the frame's whole
length (for TFRecord: 8-byte length, 4-byte CRC, data, 4-byte CRC). With it a
reader seeks straight to record ``i`` instead of walking the frames before it.

An index is trusted only as far as it agrees with its shard: offsets start at
0, each frame starts where the last ended, and the last one ends at the end
of the file. Anything else is an error naming the index (a stale or damaged
sidecar must never send a reader into the middle of a record).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import fs
from ..errors import CodecIOError

__all__ = ["INDEX_SUFFIX", "format_index", "parse_index"]

INDEX_SUFFIX = ".idx"
#: longest index line dstore reads: two 20-digit numbers, a space and a newline
_MAX_LINE = 48


def format_index(lengths: Sequence[int], start: int = 0) -> bytes:
    """Index lines for consecutive frames of ``lengths`` bytes from offset ``start``."""
    out = []
    pos = start
    for n in lengths:
        out.append(f"{pos} {n}\n")
        pos += n
    return "".join(out).encode("ascii")


def parse_index(data: bytes, path: str, file_size: int, records: int | None = None) -> np.ndarray:
    """The frame offsets an index lists (``records + 1`` of them, the last being the
    end of the file), checked against the shard's size and record count.

    Raises :class:`~dstore.errors.CodecIOError` naming ``path`` when it does not match."""
    if len(data) > _MAX_LINE * (file_size // 16 + 1):  # more lines than the shard has frames
        raise CodecIOError(f"{path}: index larger than its shard could need (not this shard's)")
    try:
        table = np.array([line.split() for line in data.decode("ascii").splitlines()], np.int64)
    except (UnicodeDecodeError, ValueError, OverflowError):
        raise CodecIOError(f"{path}: not a record index (lines of 'offset length')") from None
    if table.size == 0:
        table = np.zeros((0, 2), np.int64)
    if table.ndim != 2 or table.shape[1] != 2:
        raise CodecIOError(f"{path}: not a record index (lines of 'offset length')")
    offsets, lengths = table[:, 0], table[:, 1]
    ends = np.concatenate([[0], np.cumsum(lengths)]) if len(lengths) else np.zeros(1, np.int64)
    if (lengths <= 0).any() or not np.array_equal(offsets, ends[:-1]) or ends[-1] != file_size:
        raise CodecIOError(
            f"{path}: index does not match its shard ({len(offsets)} records, frames not "
            f"contiguous or not ending at byte {file_size}); rebuild it with 'dstore index'"
        )
    if records is not None and len(offsets) != records:
        raise CodecIOError(
            f"{path}: index lists {len(offsets)} records, its shard holds {records}; "
            "rebuild it with 'dstore index'"
        )
    return ends


def read_index(path: str, shard_path: str, records: int | None = None) -> np.ndarray:
    """:func:`parse_index` of the sidecar at ``path`` for the shard at ``shard_path``."""
    size = fs.getsize(shard_path)
    try:
        with fs.open_binary(path) as f:
            data = f.read(_MAX_LINE * (size // 16 + 1) + 1)
    except OSError as e:
        raise CodecIOError(f"{path}: cannot read the record index: {e.strerror or e}") from None
    return parse_index(data, path, size, records)
