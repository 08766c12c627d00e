"""Per-shard record indexes: ``<shard>.idx`` files, one line per record.

The format is the one NVIDIA DALI's ``tfrecord2idx`` writes and DALI and the
``tfrecord`` package read: ASCII lines ``"<offset> <length>\\n"``, the byte
offset where a record's frame starts in the shard and the frame's whole
length (for TFRecord: 8-byte length, 4-byte CRC, data, 4-byte CRC). With it a
reader seeks straight to record ``i`` instead of walking the frames before it.

Where they live: in the folder's :data:`INDEX_DIR` (``.dstore-index/``), never
beside the shards, where ``glob("train-*")`` or ``*.tfrecord*`` (how TFDS and
tf.data examples list shards) would hand them to TensorFlow as shards. A
``<shard>.idx`` beside a shard (dstore's outputs before, DALI's
``tfrecord2idx``, ``dstore index --out``) is still read.

An index is trusted only as far as it agrees with its shard: offsets start at
0, each frame starts where the last ended, and the last one ends at the end
of the file; then the reader walks the shard's frame headers once and requires
every entry to be exactly one whole frame (:func:`check_frames`), since frames
hidden inside a record's bytes can tile a file too. Anything else is an error
naming the index (a stale, damaged or forged index must never send a reader
into the middle of a record).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import IO, Any

import numpy as np

from .. import fs
from ..errors import CodecIOError
from ..model import names

__all__ = [
    "INDEX_DIR",
    "INDEX_SUFFIX",
    "check_frames",
    "format_index",
    "index_name",
    "parse_index",
    "sidecars",
    "write_index",
]

INDEX_SUFFIX = ".idx"
#: the folder, inside a dataset's folder, that holds its record indexes: a dot-folder,
#: which no ``<split>-*`` or ``*.tfrecord*`` pattern matches and globs skip
INDEX_DIR = ".dstore-index"


def index_name(shard_file: str) -> str:
    """Where the index of the shard ``shard_file`` (relative to its folder) is written,
    relative to the same folder."""
    return f"{INDEX_DIR}/{shard_file}{INDEX_SUFFIX}"


def sidecars(shard_path: str) -> list[str]:
    """The places an index of the local shard ``shard_path`` is looked for, in order:
    the folder's :data:`INDEX_DIR`, then beside it (older outputs, DALI's tool)."""
    folder, name = os.path.split(shard_path)
    return [os.path.join(folder, INDEX_DIR, name + INDEX_SUFFIX), shard_path + INDEX_SUFFIX]


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


def write_index(
    root: str,
    shard_file: str,
    lengths: Sequence[int],
    open_for_write: Callable[[str, str], AbstractContextManager[IO[bytes]]],
) -> dict[str, Any]:
    """The index of the shard ``shard_file`` just written into ``root`` (frames of
    ``lengths``), committed by ``open_for_write(folder, name)`` into :data:`INDEX_DIR`;
    its manifest entry (file, bytes, sha256)."""
    data = format_index(lengths)
    folder = names.safe_join(root, INDEX_DIR)
    if not fs.is_url(root):
        os.makedirs(folder, exist_ok=True)
    with open_for_write(folder, shard_file + INDEX_SUFFIX) as f:
        f.write(data)
    sha = hashlib.sha256(data).hexdigest()
    return {"file": index_name(shard_file), "bytes": len(data), "sha256": sha}


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
    try:
        size = fs.getsize(shard_path)
    except OSError as e:
        raise CodecIOError(f"{shard_path}: cannot read the shard: {e.strerror or e}") from None
    try:
        with fs.open_binary(path) as f:
            data = f.read(_MAX_LINE * (size // 16 + 1) + 1)
    except OSError as e:
        raise CodecIOError(f"{path}: cannot read the record index: {e.strerror or e}") from None
    return parse_index(data, path, size, records)


def check_frames(index: str, shard: str, ends: np.ndarray, frames: np.ndarray) -> None:
    """Refuse the index at ``index`` unless its frame ``ends`` (from :func:`parse_index`)
    are those of the frames the shard holds (``frames``, walked from its start).

    An index that passes :func:`parse_index` may still send record ``i`` into a frame
    hidden in record ``i - 1``'s bytes; walking the real frame headers finds it."""
    if np.array_equal(ends, frames):
        return
    n = min(len(ends), len(frames))
    differ = np.flatnonzero(ends[:n] != frames[:n])
    j = int(differ[0]) if len(differ) else n
    where = (
        f"record {j} starts at byte {int(ends[j])} by the index, at byte {int(frames[j])} "
        f"in {shard}"
        if j < n
        else f"{len(ends) - 1} records by the index, {len(frames) - 1} in {shard}"
    )
    raise CodecIOError(
        f"{index}: {where} (the index does not describe this shard's frames); "
        "rebuild it with 'dstore index'"
    )
