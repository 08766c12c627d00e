"""Reading a Parquet row group in pieces whose size is bounded, checked against its footer.

A footer only *says* how many rows a row group holds and how large its column
chunks are; dictionary and run-length encodings make a few stored bytes decode to
anything (a 525-byte file whose one dictionary entry of 1 MiB is repeated 20,000
times decodes to 20 GB). So:

* :func:`check_footer`: the file's row count is its row groups' sum, and every
  column chunk holds a value per row at least (exactly one where it is not a list);
* :func:`iter_group`: a row group is decoded a batch of rows at a time (pyarrow
  streams the pages), as many rows as keep a batch about :data:`BATCH_BYTES` even
  at the largest value its dictionary holds; the rows it yields are counted against
  the footer's;
* every column chunk may decode to what it stores uncompressed plus at most
  :data:`~dstore.codecs.arraytree.chunked.MAX_CHUNK_BYTES` (1 GiB): fixed-width
  values are checked from the footer before anything is read; a byte-string column
  whose dictionary could expand past it has its indices read first (its dictionary
  kept as one: nothing expanded); other byte strings are counted as they decode.
  Plain encodings never reach it (their pages hold their values); what does is
  expansion by a dictionary or by runs, beyond a gibibyte.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ... import fs
from ...errors import CodecIOError
from ..arraytree.chunked import max_chunk_bytes

__all__ = ["BATCH_BYTES", "GroupPlan", "check_footer", "group_plan", "iter_group"]

#: decoded bytes a batch of a row group is sized to, at the largest value it may hold
BATCH_BYTES = 16 << 20
#: bytes of a fixed-width Parquet value by physical type (byte arrays vary)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}


def check_footer(meta: Any, path: str) -> None:
    """Refuse a footer whose counts disagree with each other: the file's rows and its
    row groups' sum, a column chunk holding fewer values than its row group's rows (or
    more, for a column that is no list: one value or null per row)."""
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    total = sum(g.num_rows for g in groups)
    if meta.num_rows != total:
        raise CodecIOError(
            f"{path}: the footer says {meta.num_rows:,} rows and its row groups hold {total:,}"
        )
    flat = [meta.schema.column(c).max_repetition_level == 0 for c in range(meta.num_columns)]
    for g, group in enumerate(groups):
        for c in range(group.num_columns):
            values = group.column(c).num_values
            if values < group.num_rows or (flat[c] and values != group.num_rows):
                raise CodecIOError(
                    f"{path}: row group {g} says {group.num_rows:,} rows and its column "
                    f"{group.column(c).path_in_schema!r} holds {values:,} values"
                )


def _leaves(t: pa.DataType) -> int:
    """Parquet leaf columns an Arrow field of type ``t`` is stored as."""
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaves(t.value_type)
    return 1


def _uncompressed_page_size(path: str, offset: int) -> int | None:
    """The ``uncompressed_page_size`` of the Parquet page header at ``offset`` (Thrift
    compact: field 1 the page type, field 2 this, both i32), None if it does not parse."""
    with fs.open_binary(path) as f:
        f.seek(offset)
        head = f.read(32)
    pos, field = 0, 0
    while pos < len(head) and field < 2:
        byte = head[pos]
        delta, kind = byte >> 4, byte & 0x0F
        if delta == 0 or kind != 5:  # a long-form field id or not an i32: not a header we read
            return None
        field, pos, value, shift = field + delta, pos + 1, 0, 0
        while pos < len(head):
            value |= (head[pos] & 0x7F) << shift
            shift, pos = shift + 7, pos + 1
            if not head[pos - 1] & 0x80:
                break
        if field == 2:
            size = (value >> 1) ^ -(value & 1)
            return size if size >= 0 else None
    return None


@dataclass
class _Field:
    """One requested field's leaf column chunks in a row group: what they store
    uncompressed, what their values are declared to take, the most bytes a row's
    values may decode to."""

    name: str
    stored: int = 0
    declared: int = 0
    row_bytes: float = 0.0
    #: a byte-string column of one leaf whose dictionary may expand past the limit:
    #: its indices are read first (:func:`_dictionary_bytes`), nothing decoded
    expands: bool = False


def _fields(pf: pq.ParquetFile, path: str, g: int, names: Sequence[str]) -> list[_Field]:
    meta, schema = pf.metadata, pf.schema_arrow
    group = meta.row_group(g)
    rows = max(1, group.num_rows)
    out, leaf = [], 0
    for field in schema:
        count = _leaves(field.type)
        if field.name in names:
            f = _Field(field.name)
            for c in range(leaf, leaf + count):
                chunk, column = group.column(c), meta.schema.column(c)
                f.stored += chunk.total_uncompressed_size
                width = _WIDTH.get(chunk.physical_type, column.length or 0)
                if chunk.physical_type != "BYTE_ARRAY":
                    f.declared += chunk.num_values * width
                    f.row_bytes += chunk.num_values / rows * width
                    continue
                f.declared += chunk.num_values * 4  # an offset each, at least
                if chunk.has_dictionary_page:  # a row may repeat the largest entry
                    size = _uncompressed_page_size(path, chunk.dictionary_page_offset)
                    largest = size or chunk.total_uncompressed_size
                    f.row_bytes += chunk.num_values / rows * largest
                    f.expands = count == 1 and chunk.num_values * largest > max_chunk_bytes()
                else:
                    f.row_bytes += chunk.total_uncompressed_size / rows
            out.append(f)
        leaf += count
    return out


def _decoded_bytes(arr: Any) -> int:
    """Bytes ``arr`` holds once decoded: a dictionary array's values repeated as its
    indices say (dstore decodes them), else its buffers."""
    if not pa.types.is_dictionary(arr.type):
        return int(arr.nbytes)
    values = arr.dictionary
    large = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    if not (large or pa.types.is_string(values.type) or pa.types.is_binary(values.type)):
        return len(arr) * 8
    offsets = np.frombuffer(values.buffers()[1], np.int64 if large else np.int32)
    lengths = np.diff(offsets[values.offset : values.offset + len(values) + 1])
    return int(lengths[np.asarray(arr.indices.fill_null(0))].sum()) + 4 * len(arr)


def _dictionary_bytes(path: str, g: int, name: str) -> int:
    """What byte-string column ``name`` of row group ``g`` decodes to, from its
    dictionary and indices alone (read as a dictionary array: nothing expanded)."""
    handle = fs.open_binary(path) if fs.is_url(path) else None
    try:
        with pq.ParquetFile(handle or path, read_dictionary=[name]) as pf:
            column = pf.read_row_group(g, columns=[name]).column(0)
    finally:
        if handle is not None:
            handle.close()
    return sum(_decoded_bytes(part) for part in column.chunks)


def _too_large(path: str, g: int, f: _Field, decoded: int, limit: int) -> CodecIOError:
    return CodecIOError(
        f"{path}: row group {g}, column {f.name!r} decodes to {decoded:,} bytes or more and "
        f"stores {f.stored:,} (uncompressed): more than the limit of {limit:,} beyond them "
        "(a dictionary or run-length bomb?); raise it with the environment variable "
        "DSTORE_MAX_CHUNK_BYTES or dstore.codecs.arraytree.chunked.MAX_CHUNK_BYTES"
    )


@dataclass(frozen=True)
class GroupPlan:
    """What reading a row group's columns takes, from its footer (checked): its fields'
    chunks, the rows of a batch, the rows it declares."""

    fields: list[_Field]
    batch: int
    rows: int


def group_plan(pf: pq.ParquetFile, path: str, g: int, names: Sequence[str], rows: int) -> GroupPlan:
    """Row group ``g``'s columns ``names`` checked against what their chunks store plus the
    limit before anything is decoded, and the rows of a batch (at most ``rows``, fewer
    where a row may decode large). A reader keeps it: these checks read the footer (and a
    dictionary whose expansion could pass the limit), the same at every read of the group."""
    limit = max_chunk_bytes()
    fields = _fields(pf, path, g, names)
    for f in fields:
        if f.declared > f.stored + limit:
            raise _too_large(path, g, f, f.declared, limit)
        if f.expands and (size := _dictionary_bytes(path, g, f.name)) > f.stored + limit:
            raise _too_large(path, g, f, size, limit)
    row_bytes = sum(f.row_bytes for f in fields)
    batch = max(1, min(rows, int(BATCH_BYTES // max(row_bytes, 1.0))))
    return GroupPlan(fields, batch, pf.metadata.row_group(g).num_rows)


def iter_group(
    pf: pq.ParquetFile,
    path: str,
    g: int,
    names: Sequence[str],
    rows: int,
    plan: GroupPlan | None = None,
) -> Iterator[pa.RecordBatch]:
    """Row group ``g``'s columns ``names`` as record batches of at most ``rows`` rows,
    fewer where a row may decode large; its rows counted against the footer's, every
    column's decoded bytes against what it stores plus the limit. ``plan``: the group's
    :func:`group_plan` for these ``names`` and ``rows``, made earlier (else made here)."""
    plan = plan or group_plan(pf, path, g, names, rows)
    limit = max_chunk_bytes()
    decoded = dict.fromkeys(names, 0)
    seen = 0
    try:
        batches = pf.iter_batches(
            batch_size=plan.batch, row_groups=[g], columns=list(names), use_threads=False
        )
        for part in batches:
            for f in plan.fields:
                decoded[f.name] += _decoded_bytes(part.column(f.name))
                if decoded[f.name] > f.stored + limit:
                    raise _too_large(path, g, f, decoded[f.name], limit)
            seen += part.num_rows
            yield part
    except (pa.ArrowException, OSError) as err:
        if isinstance(err, CodecIOError):
            raise
        why = " ".join(str(err).split())
        raise CodecIOError(f"{path}: row group {g} does not read: {why}") from None
    if seen != plan.rows:
        raise CodecIOError(
            f"{path}: row group {g} holds {seen:,} rows and its footer says {plan.rows:,}"
        )
