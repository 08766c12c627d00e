"""Reading the records at any positions of a sharded split (a global shuffle's window,
a map-style batch): each shard asked only for its own records, with what a reader keeps
for its life (open files, a decoding pool) instead of opening and building them per call.

:class:`IndexedReads` gives :class:`~dstore.sharding.ShardedDirectoryReader` its
``read_records``; a format answers :meth:`IndexedReads.read_shard_records` for one
shard (the default reads runs of consecutive positions with ``read_shard``). A format
whose records are byte spans found from an index (a TFRecord frame index, a tar's
member index) reads them with :func:`pread_spans` from a file kept open
(:class:`OpenFiles`), several spans that lie close together in one read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from itertools import chain, islice
from typing import Any

import numpy as np

from .. import fs
from ..abc import checked_indexes, runs_of, take_records
from ..errors import CodecIOError
from ..model import concat_columns, empty_column
from ..model.samples import BatchRows
from ..model.schema import Batch, SplitSpec
from ..parallel import DECODE_GROUP, KeptPool

__all__ = [
    "GAP_BYTES",
    "IndexedReads",
    "OpenFiles",
    "decode_into_batch",
    "pread_spans",
    "stored_records",
]

#: bytes between two wanted spans read through rather than sought over: one read of a
#: few extra bytes costs less than a second system call
GAP_BYTES = 64 * 1024


class OpenFiles:
    """Read-only descriptors of local files, opened once per process and kept until
    :meth:`close` (a forked process opens its own: offsets are not shared by ``pread``,
    but a descriptor inherited across ``fork`` is one the parent may close)."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._pid = os.getpid()

    def fd(self, path: str) -> int:
        if self._pid != os.getpid():
            self._fds, self._pid = {}, os.getpid()  # the parent's, not ours to close
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = self._fds[path] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:
                raise CodecIOError(f"{path}: no such shard (the manifest lists it)") from None
            except OSError as e:
                raise CodecIOError(f"{path}: cannot open: {e.strerror or e}") from None
        return fd

    def close(self) -> None:
        if self._pid == os.getpid():
            for fd in self._fds.values():
                os.close(fd)
        self._fds = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"_fds": {}, "_pid": -1}


def pread_spans(
    fd: int, path: str, spans: Sequence[tuple[int, int]], gap: int = GAP_BYTES
) -> Iterator[memoryview]:
    """The bytes ``start:end`` of each span (sorted by start, not overlapping) of the
    file open as ``fd``, spans less than ``gap`` bytes apart fetched by one read."""
    i = 0
    while i < len(spans):
        j = i + 1
        while j < len(spans) and spans[j][0] - spans[j - 1][1] < gap:
            j += 1
        lo, hi = spans[i][0], spans[j - 1][1]
        buf = memoryview(os.pread(fd, hi - lo, lo))
        if len(buf) != hi - lo:
            raise CodecIOError(f"{path}: ends at byte {lo + len(buf)}, inside a record")
        for start, end in spans[i:j]:
            yield buf[start - lo : end - lo]
        i = j


def decode_into_batch(
    decode: Callable[[list[Any], BatchRows, int], None],
    spec: SplitSpec,
    names: list[str],
    records: list[Any],
    pool: Executor,
) -> Batch:
    """Stored ``records`` decoded on ``pool``, :data:`DECODE_GROUP` a task, into one
    batch: ``decode(group, rows, first)`` fills rows ``first...`` of ``rows``."""
    rows = BatchRows(spec, names, len(records))
    starts = range(0, len(records), DECODE_GROUP)
    list(pool.map(lambda lo: decode(records[lo : lo + DECODE_GROUP], rows, lo), starts))
    return rows.batch()


def stored_records(raw: Iterator[Any], count: int, spec: SplitSpec) -> list[Any]:
    """The ``count`` stored records ``raw`` yields for a read (``decode_raw``); fewer is
    an error naming the split."""
    records = list(islice(raw, count))
    if len(records) != count:
        raise CodecIOError(f"split {spec.name!r}: {count:,} records asked, {len(records):,} read")
    return records


class IndexedReads:
    """``read_records`` for a sharded reader: the positions asked, cut by shard."""

    # what ShardedDirectoryReader provides
    shards: dict[str, list[Any]]
    workers: int
    shard_cache: Any
    split: Callable[[str], SplitSpec]
    read_shard: Callable[..., Iterator[Batch]]
    check_shard: Callable[..., None]
    decode_records: Callable[[SplitSpec, list[str], list[Any], BatchRows, int], None]

    def decode_stored(
        self, spec: SplitSpec, names: list[str], records: list[Any], pool: Executor
    ) -> Batch:
        """Stored ``records`` decoded with ``decode_records`` on ``pool`` into one batch."""
        return decode_into_batch(
            lambda part, rows, first: self.decode_records(spec, names, part, rows, first),
            spec,
            names,
            records,
            pool,
        )

    def read_records(
        self, split: str, indexes: Sequence[int] | np.ndarray, fields: Sequence[str] | None = None
    ) -> Batch:
        """The records at ``indexes`` of ``split`` in the order asked: each shard that
        holds some reads its own (:meth:`read_shard_records`), in storage order."""
        spec = self.split(split)
        names = list(fields) if fields is not None else list(spec.fields)
        idx = checked_indexes(indexes, spec.count, f"split {split!r}")
        wanted = np.unique(idx)
        shards = self.shards[split]
        starts = np.cumsum([0, *(s.records for s in shards)])
        which = np.searchsorted(starts, wanted, side="right") - 1
        pool = self.decode_pool()
        asked = []
        for k in np.unique(which).tolist():
            shard = shards[k]
            if self.shard_cache is not None and fs.is_url(shard.path):
                local = self.shard_cache.local(shard.path, shard.size, shard.sha256)
                shard = _with_path(shard, local)
            # its size against the manifest, as a read of a range checks it (kept per
            # file identity: a stat a read)
            self.check_shard(shard, whole=False)
            asked.append((shard, wanted[which == k] - starts[k]))
        if not asked:
            return {n: empty_column(spec.fields[n].kind) for n in names}
        if self.decodes_across_shards:
            # every shard's stored records decoded into one batch: no copy to join them
            raw = chain.from_iterable(self.shard_raw_records(s, p, names) for s, p in asked)
            return take_records(self.decode_raw(spec, names, raw, len(wanted), pool), wanted, idx)
        parts = [self.read_shard_records(spec, names, s, p, pool) for s, p in asked]
        cols = {n: concat_columns(spec.fields[n].kind, [p[n] for p in parts]) for n in names}
        return take_records(cols, wanted, idx)

    def read_shard_records(
        self, spec: SplitSpec, names: list[str], shard: Any, positions: np.ndarray, pool: Executor
    ) -> Batch:
        """Records at sorted distinct ``positions`` of ``shard``, decoded, as one batch.

        A format that reads stored records apart from decoding them
        (``decodes_across_shards``) reads them, then decodes them as one batch; else
        each run of consecutive positions is read with ``read_shard``, unless the
        format, whose single records are one seek away, overrides this."""
        if self.decodes_across_shards:
            raw = self.shard_raw_records(shard, positions, names)
            return self.decode_raw(spec, names, iter(raw), len(raw), pool)
        parts: list[Batch] = []
        for a, b in runs_of(positions):
            parts.extend(self.read_shard(spec, names, shard, a, b, b - a, pool))
        return {n: concat_columns(spec.fields[n].kind, [p[n] for p in parts]) for n in names}

    #: True when the format reads a shard's stored records (:meth:`shard_raw_records`)
    #: apart from decoding them (:meth:`decode_raw`): the records of several shards are
    #: then decoded into one batch, not decoded per shard and joined
    decodes_across_shards = False

    def shard_raw_records(
        self, shard: Any, positions: np.ndarray, names: Sequence[str] = ()
    ) -> list[Any]:
        """The stored records at sorted distinct ``positions`` of ``shard``, undecoded: of
        fields ``names`` where the format stores fields apart (else all of each record)."""
        raise NotImplementedError

    def decode_raw(
        self, spec: SplitSpec, names: list[str], raw: Iterator[Any], count: int, pool: Executor
    ) -> Batch:
        """``count`` stored records from ``raw`` decoded into one batch."""
        raise NotImplementedError

    def decode_pool(self) -> Executor:
        """The pool this reader decodes records at positions on, kept for its life."""
        kept = self.__dict__.get("_kept_pool")
        if kept is None:
            kept = self.__dict__["_kept_pool"] = KeptPool(self.workers, "dstore-decode")
        return kept.get()

    def open_files(self) -> OpenFiles:
        """The shard files this reader keeps open for reads at positions."""
        files = self.__dict__.get("_open_files")
        if files is None:
            files = self.__dict__["_open_files"] = OpenFiles()
        return files

    def close_kept(self) -> None:
        """Close what :meth:`decode_pool` and :meth:`open_files` kept."""
        for key in ("_kept_pool", "_open_files"):
            kept = self.__dict__.pop(key, None)
            if kept is not None:
                kept.close()


def _with_path(shard: Any, path: str) -> Any:
    import dataclasses

    return dataclasses.replace(shard, path=path)
