"""Rows at positions of a Parquet shard, each image read from its own page.

A shuffled window asks for rows scattered over a shard's row groups, about one
per group. pyarrow reads a group's columns whole, so :class:`PageRows` reads
instead, for one reading process:

* an image field (Hugging Face's ``struct<bytes, path>``, ``path`` null in every
  row group, as dstore writes it) from the page that holds each asked row
  (:mod:`.direct`: its page headers walked once per row group, the page's CRC
  checked);
* the shard's other asked fields from a copy kept per shard, read in one call
  once every row group passes :func:`.pages.group_plan`'s checks, when they may
  decode to at most :data:`KEPT_BYTES` (labels, ids, small vectors).

:meth:`PageRows.rows` answers None whenever a shard or row group does not
qualify (a URL, another layout, a page that does not read as plain values, a
field too large to keep): the caller reads the row group with pyarrow.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ... import fs
from ...errors import CodecIOError
from .direct import PageRef, chunk_pages, direct_leaf, page_values
from .pages import group_plan

__all__ = ["KEPT_BYTES", "PageRows", "PagedRecord", "paged_table", "reads_by_page"]

#: the most bytes a shard's other asked fields may store to be kept in memory
KEPT_BYTES = 32 << 20


@dataclass
class _Shard:
    """What reading rows of one shard by page takes: the image fields' ``bytes`` leaves
    (leaf index, maximum definition level, column path), the other fields' kept rows,
    the Arrow schema of the fields asked."""

    images: dict[str, tuple[int, int, str]]
    kept: pa.Table
    schema: pa.Schema
    fd: int
    #: each row group's and leaf's pages and the row each page ends at (None: pyarrow's)
    pages: dict[tuple[int, int], tuple[list[PageRef], np.ndarray] | None] = field(
        default_factory=dict
    )


def _binary_array(values: list[memoryview], kind: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``kind`` (binary or large binary), built from its
    buffers: ``pa.array`` of a list imports pandas (0.3 s in every worker process)."""
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64 if kind == pa.large_binary() else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = pa.py_buffer(b"".join(values))
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(offsets), data])


def _leaf_index(meta: Any) -> dict[str, int]:
    return {meta.schema.column(c).path: c for c in range(meta.num_columns)}


def _image_leaves(pf: pq.ParquetFile, names: list[str]) -> dict[str, tuple[int, int]]:
    """The asked fields stored as ``struct<bytes, path>`` whose path is null in every
    row group: each one's ``bytes`` leaf and its maximum definition level."""
    meta, schema, leaves = pf.metadata, pf.schema_arrow, _leaf_index(pf.metadata)
    out = {}
    for name in names:
        t = schema.field(name).type
        if not pa.types.is_struct(t) or {t.field(i).name for i in range(t.num_fields)} != {
            "bytes",
            "path",
        }:
            continue
        b, p = leaves.get(f"{name}.bytes"), leaves.get(f"{name}.path")
        if b is None or p is None or not direct_leaf(meta, b):
            continue
        if all(_all_null(meta.row_group(g), p) for g in range(meta.num_row_groups)):
            out[name] = (b, meta.schema.column(b).max_definition_level)
    return out


def _all_null(group: Any, leaf: int) -> bool:
    stats = group.column(leaf).statistics
    return stats is not None and stats.has_null_count and stats.null_count == group.num_rows


def _kept(pf: pq.ParquetFile, path: str, names: list[str]) -> pa.Table | None:
    """Fields ``names`` of every row of ``pf``, read in one call once every row group's
    columns pass :func:`.pages.group_plan`'s checks and the most they may decode to is
    at most :data:`KEPT_BYTES`; None otherwise."""
    if not names:
        return pa.table({})
    meta = pf.metadata
    most = 0.0
    for g in range(meta.num_row_groups):
        rows = meta.row_group(g).num_rows
        plan = group_plan(pf, path, g, names, rows)  # a bomb is refused here, unread
        most += sum(f.row_bytes for f in plan.fields) * rows
        if most > KEPT_BYTES:
            return None
    try:
        # iter_batches, not read(): read() imports pandas (0.3 s in every worker process)
        batches = pf.iter_batches(batch_size=1 << 16, columns=names, use_threads=False)
        schema = pa.schema([pf.schema_arrow.field(n) for n in names])
        return pa.Table.from_batches(list(batches), schema).combine_chunks()
    except (pa.ArrowException, OSError) as err:
        why = " ".join(str(err).split())
        raise CodecIOError(f"{path}: does not read: {why}") from None


@dataclass(frozen=True)
class PagedRecord:
    """One record read by page: each image field's encoded bytes (a view of its page), a
    one-row table of its other fields asked, and the Arrow schema of all of them."""

    images: dict[str, memoryview]
    kept: pa.Table
    schema: pa.Schema


def paged_table(records: list[PagedRecord]) -> pa.Table:
    """``records`` (of one schema) as the table pyarrow would have read them into."""
    schema = records[0].schema
    kept = pa.concat_tables([r.kept for r in records]).combine_chunks()
    columns = []
    for f in schema:
        if f.name not in records[0].images:
            columns.append(kept.column(f.name).combine_chunks())
            continue
        t = f.type
        children = {
            "bytes": _binary_array([r.images[f.name] for r in records], t.field("bytes").type),
            "path": pa.nulls(len(records), t.field("path").type),
        }
        columns.append(
            pa.StructArray.from_arrays(
                [children[t.field(i).name] for i in range(t.num_fields)],
                fields=[t.field(i) for i in range(t.num_fields)],
            )
        )
    return pa.Table.from_arrays(columns, schema=schema)


def reads_by_page(pf: pq.ParquetFile, path: str, images: list[str]) -> bool:
    """Whether a read at a position of ``pf`` reads about one record's bytes: a local file
    whose ``images`` all qualify (:func:`_image_leaves`), the rest of its columns small
    enough to keep, and the first row group's image pages of one record each or several
    (dstore's layout; a file of a page per row group costs a row group a record)."""
    if fs.is_url(path) or not images or set(_image_leaves(pf, images)) != set(images):
        return False
    meta, leaves = pf.metadata, _leaf_index(pf.metadata)
    if not meta.num_row_groups:
        return False
    image_leaves = {leaves[f"{n}.bytes"] for n in images}
    rest = sum(
        meta.row_group(g).column(c).total_uncompressed_size
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
        if meta.schema.column(c).path.split(".")[0] not in images
    )
    if rest > KEPT_BYTES:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        for leaf in image_leaves:
            pages = chunk_pages(fd, meta.row_group(0).column(leaf))
            if pages is None or (len(pages) == 1 and pages[0].values > 1):
                return False
    finally:
        os.close(fd)
    return True


class PageRows:
    """One reading process's reads of rows at positions by page (see the module)."""

    def __init__(self) -> None:
        self._shards: dict[tuple[str, tuple[str, ...]], _Shard | None] = {}
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _shard(self, pf: pq.ParquetFile, path: str, names: list[str]) -> _Shard | None:
        if self._pid != os.getpid():  # a forked worker: the parent's descriptors and lock
            self._shards, self._pid, self._lock = {}, os.getpid(), threading.Lock()
        key = (path, tuple(names))
        with self._lock:  # reads on threads: one descriptor and one copy per shard
            if key not in self._shards:
                self._shards[key] = self._make(pf, path, names)
            return self._shards[key]

    def _make(self, pf: pq.ParquetFile, path: str, names: list[str]) -> _Shard | None:
        if fs.is_url(path):
            return None
        images = _image_leaves(pf, names)
        if not images:
            return None
        kept = _kept(pf, path, [n for n in names if n not in images])
        if kept is None:
            return None
        meta, arrow = pf.metadata, pf.schema_arrow
        leaves = {
            n: (b, level, str(meta.schema.column(b).path)) for n, (b, level) in images.items()
        }
        schema = pa.schema([arrow.field(n) for n in names], metadata=arrow.metadata)
        return _Shard(leaves, kept, schema, os.open(path, os.O_RDONLY))

    def rows(
        self, pf: pq.ParquetFile, path: str, bounds: np.ndarray, names: list[str], at: np.ndarray
    ) -> list[PagedRecord] | None:
        """Fields ``names`` of the rows at positions ``at`` (sorted) of the shard whose row
        groups start at ``bounds``, a :class:`PagedRecord` each; None where pyarrow
        should read them."""
        shard = self._shard(pf, path, names)
        if shard is None:
            return None
        groups = np.searchsorted(bounds, at, side="right") - 1
        images: dict[str, list[memoryview]] = {}
        for name, leaf in shard.images.items():
            images[name] = []
            for g in np.unique(groups).tolist():
                rows = (at[groups == g] - bounds[g]).tolist()
                got = self._values(shard, pf, path, g, leaf, rows)
                if got is None:
                    return None
                images[name].extend(got)
        # slices, not a take: pyarrow's take imports pyarrow.compute (60 ms a worker)
        return [
            PagedRecord({n: v[i] for n, v in images.items()}, shard.kept.slice(p, 1), shard.schema)
            for i, p in enumerate(at.tolist())
        ]

    def _values(
        self,
        shard: _Shard,
        pf: pq.ParquetFile,
        path: str,
        g: int,
        leaf: tuple[int, int, str],
        rows: list[int],
    ) -> list[memoryview] | None:
        """The values of ``leaf`` (index, maximum definition level, path) at ``rows`` (of
        row group ``g``), page by page."""
        index, level, column = leaf
        key = (g, index)
        if key not in shard.pages:
            found_pages = chunk_pages(shard.fd, pf.metadata.row_group(g).column(index))
            shard.pages[key] = (
                None
                if found_pages is None
                else (found_pages, np.cumsum([p.values for p in found_pages]))
            )
        found = shard.pages[key]
        if found is None:
            return None
        pages, ends = found
        which = np.searchsorted(ends, rows, side="right").tolist()
        if which and which[-1] >= len(pages):
            return None
        out: list[memoryview] = []
        for i in sorted(set(which)):
            start = int(ends[i]) - pages[i].values
            wanted = [r - start for r, w in zip(rows, which, strict=True) if w == i]
            where = f"{path}: row group {g}, column {column!r}, page {i}"
            values = page_values(shard.fd, pages[i], level, wanted, where)
            if values is None:
                return None
            out.extend(values)
        return out

    def close(self) -> None:
        if self._pid == os.getpid():
            for shard in self._shards.values():
                if shard is not None:
                    os.close(shard.fd)
        self._shards = {}
