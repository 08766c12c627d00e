"""``dstore index``: record indexes for shards dstore did not write.

dstore writes a record index for every plain shard of a format whose records
are frames (TFRecord), in the output's ``.dstore-index/`` folder; this writes
the same index for files written by TensorFlow, TFDS or anyone, into
``.dstore-index/`` beside them, so that dstore reads any record with one seek
while no ``<split>-*`` or ``*.tfrecord*`` glob over the folder finds an index.
``out=DIR`` (``--out DIR``) writes ``<file>.idx`` files into ``DIR`` instead:
the files NVIDIA DALI and the ``tfrecord`` package read, for those who want
them (beside the shards when ``DIR`` is their folder). A compressed file cannot
be entered mid-way, so it is refused by name.

Each index is written to a temporary name in its folder and renamed, so two
runs indexing the same file at once both leave a complete, identical index.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CodecIOError, UnknownCodecError, UnsafePathError, UsageError
from ..registry import codecs_with, get_codec_class, infer_codec
from ..sharding.index import INDEX_DIR, INDEX_SUFFIX, format_index

__all__ = ["IndexReport", "index"]


@dataclass
class IndexReport:
    """What :func:`index` wrote: one ``(index path, records)`` per file."""

    written: list[tuple[str, int]] = field(default_factory=list)

    def summary(self) -> str:
        records = sum(n for _, n in self.written)
        return f"{len(self.written)} index file(s) written, {records} records"


def index(
    paths: Sequence[str],
    *,
    out: str | None = None,
    format: str | None = None,
    follow_links: bool = False,
) -> IndexReport:
    """Write a record index of each file of ``paths`` (a file, a folder of shards, a
    glob) into ``.dstore-index/`` in the file's folder, where dstore reads it; or,
    with ``out``, ``<file>.idx`` files in DALI's format into the folder ``out``.

    A file linked in from outside its folder (or the glob's fixed folder) is refused
    unless ``follow_links``.

    ``format`` names the files' format (default: from each path); only formats whose
    records are frames (``Codec.frame_indexes``: TFRecord) have indexes to write.

    Raises
    ------
    UsageError
        a format without record indexes (npz...), naming the formats with them.
    CodecIOError
        a file that is compressed or not of the format, naming it (nothing is written
        for it; indexes of the files before it stay).
    UnsafeInputError
        a file linked in from outside the folder, without ``follow_links``.
    """
    report = IndexReport()
    for spec in paths:
        cls = get_codec_class(format or _format_of(spec))
        if not cls.frame_indexes:
            which = ", ".join(codecs_with(lambda c: c.frame_indexes))
            raise UsageError(
                f"{spec}: {cls.name} files have no record index to write (indexes are "
                f"written for {which} files)"
            )
        for path in cls.frame_files(spec, follow_links):
            lengths = cls.frame_lengths(path)
            folder = out if out is not None else _index_folder(os.path.dirname(path) or ".")
            os.makedirs(folder, exist_ok=True)
            target = os.path.join(folder, os.path.basename(path) + INDEX_SUFFIX)
            _write_atomically(target, format_index(lengths))
            report.written.append((target, len(lengths)))
    return report


def _index_folder(data_folder: str) -> str:
    """``data_folder``'s ``.dstore-index/``, refused when it is a link (an index written
    through it would land outside the folder) or not a folder."""
    folder = os.path.join(data_folder, INDEX_DIR)
    if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
        raise UnsafePathError(
            f"{folder}: is a link or not a folder; refusing to write record indexes through it"
        )
    return folder


def _format_of(spec: str) -> str:
    """The format a path names, or for a folder the one its first claimed file names."""
    try:
        return infer_codec(spec)
    except UnknownCodecError:
        if not os.path.isdir(spec):
            raise
        for name in sorted(os.listdir(spec)):
            with contextlib.suppress(UnknownCodecError):
                return infer_codec(os.path.join(spec, name))
        raise


def _write_atomically(target: str, data: bytes) -> None:
    tmp = f"{target}.{os.getpid()}-{secrets.token_hex(4)}.part"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise CodecIOError(f"{target}: cannot write the index: {e.strerror or e}") from None
