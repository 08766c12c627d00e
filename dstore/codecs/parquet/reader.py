"""Reading Parquet: dstore's folders (manifest), Hub folders (``data/`` too) and anyone's
files, by row group (``ds[i]`` reads one); foreign columns are mapped by type."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ... import fs, links
from ...abc import RANGE_BYTES
from ...errors import CodecIOError, SchemaError
from ...images.pixels import decode_pixel_column, image_format
from ...model import Column, VarColumn, empty_column
from ...model.arrow import arrow_fields, from_arrow, list_axes
from ...model.labels import is_one_hot, to_one_hot
from ...model.schema import Batch, FieldSpec, SplitSpec
from ...sharding import ShardedDirectoryReader, ShardFile, group_ranges
from ...sharding.records import stored_records
from . import Storage
from .pages import BATCH_BYTES, GroupPlan, check_footer, group_plan, iter_group
from .rows import PagedRecord, PageRows, paged_table, reads_by_page

__all__ = ["ParquetReader"]

#: rows of a column read at a time to learn its lists' lengths (fewer where rows are large)
_SCAN_ROWS = 1 << 16


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())  # pyarrow's text can span lines (thrift's end in one)


def open_parquet(path: str) -> pq.ParquetFile:
    """``path`` opened by pyarrow, every page that carries a CRC (dstore writes them)
    checked as it is read; anything unreadable is one line naming it."""
    try:
        source = fs.open_binary(path) if fs.is_url(path) else path
        return pq.ParquetFile(source, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        raise CodecIOError(f"{path}: not a readable Parquet file: {_one_line(e)}") from None


class ParquetReader(ShardedDirectoryReader):
    format_id = "dstore-parquet"
    codec_name = "parquet"
    file_pattern = r"\.parquet$"
    field_encoding = Storage

    def __init__(
        self,
        path: str,
        workers: int = 0,
        drop_unmapped: bool = False,
        follow_links: bool = False,
    ) -> None:
        self.encodings: dict[str, dict[str, Storage]] = {}
        self.drop_unmapped = drop_unmapped
        self.notes: list[str] = []
        self._footers_checked: set[str] = set()
        self._units: dict[str, np.ndarray | None] = {}
        self._kept_files: dict[str, pq.ParquetFile] = {}
        self._group_bounds: dict[str, np.ndarray] = {}
        self._plans: dict[tuple[str, int, tuple[str, ...], int], GroupPlan] = {}
        self._pid = os.getpid()
        self._page_rows = PageRows()
        super().__init__(path, workers, follow_links)

    def _open(self, path: str) -> pq.ParquetFile:
        """``path`` opened, its footer's counts checked (once per reader)."""
        pf = open_parquet(path)
        if path not in self._footers_checked:
            try:
                check_footer(pf.metadata, path)
            except CodecIOError:
                pf.close()
                raise
            self._footers_checked.add(path)
        return pf

    def written_encodings(self, spec: FieldSpec) -> set[str]:
        from .writer import written_encodings

        return written_encodings(spec)

    def find_files(self, path: str) -> list[str]:
        """A folder's ``*.parquet`` files, else those of its ``data/`` (the Hub's layout)."""
        data = fs.join(path, "data")
        hub = fs.isdir(data) and not any(f.endswith(".parquet") for f in fs.listdir(path))
        if hub and not fs.is_url(path):
            links.check_inside(path, [data], self.follow_links)  # data/ itself linked in
        return super().find_files(data if hub else path)

    def _groups(self, shard: ShardFile) -> list[Any]:
        pf = self._open(shard.path)
        try:
            return [pf.metadata.row_group(g) for g in range(pf.metadata.num_row_groups)]
        finally:
            pf.close()

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        """Whole row groups, gathered to about ``target_bytes`` (uncompressed) per range."""
        self.split(split)
        shards = self.shards[split]
        sizes = ([(g.num_rows, g.total_byte_size) for g in self._groups(s)] for s in shards)
        return group_ranges(sizes, target_bytes)

    def record_units(self, split: str) -> np.ndarray | None:
        """None when every shard's images are read by page (a record costs its own page:
        :func:`.rows.reads_by_page`), else a record costs the read of its row group:
        their bounds across the shards."""
        self.split(split)
        if split not in self._units:
            images = [n for n, s in self.encodings[split].items() if s.arrow == "image"]
            shards = self.shards[split]
            if images and all(self._by_page(s.path, images) for s in shards):
                self._units[split] = None
            else:
                sizes = [g.num_rows for s in shards for g in self._groups(s)]
                self._units[split] = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        return self._units[split]

    def _by_page(self, path: str, images: list[str]) -> bool:
        pf = self._open(path)
        try:
            return reads_by_page(pf, path, images)
        finally:
            pf.close()

    #: the rows a read asks of every shard are decoded into one batch (no join per shard)
    decodes_across_shards = True

    def shard_raw_records(
        self, shard: ShardFile, positions: Any, names: Sequence[str] = ()
    ) -> list[tuple[pa.Table | PagedRecord, str, int]]:
        """Columns ``names`` of the rows at sorted distinct ``positions`` of ``shard``,
        undecoded, with its shard and position: a :class:`.rows.PagedRecord` each when
        its images read by page, else a one-row slice of its row group (each group
        holding some read once, :func:`.pages.iter_group`, checked)."""
        pf = self._kept(shard.path)
        self.check_count(shard, pf.metadata.num_rows)
        bounds = self._bounds(shard.path, pf)
        columns = list(names)
        paged = self._page_rows.rows(pf, shard.path, bounds, columns, positions)
        if paged is not None:  # each image read from its page, not its whole row group
            return [(r, shard.path, p) for r, p in zip(paged, positions.tolist(), strict=True)]
        which = np.searchsorted(bounds, positions, side="right") - 1
        out: list[tuple[pa.Table | PagedRecord, str, int]] = []
        for g in np.unique(which).tolist():
            first, rows = int(bounds[g]), int(bounds[g + 1] - bounds[g])
            at = positions[which == g].tolist()
            plan = self._plan(pf, shard.path, g, columns, rows)
            parts = list(iter_group(pf, shard.path, g, columns, rows, plan))
            group = pa.Table.from_batches(parts)
            out.extend((group.slice(p - first, 1), shard.path, p) for p in at)
        return out

    def decode_raw(
        self,
        spec: SplitSpec,
        names: list[str],
        raw: Iterator[tuple[pa.Table, str, int]],
        count: int,
        pool: Executor,
    ) -> Batch:
        """``count`` rows of :meth:`shard_raw_records` (of one shard or several) decoded
        as one batch: one decode, not one per row group of ten tiles, nor a join."""
        rows = stored_records(raw, count, spec)
        if not rows:
            return {n: empty_column(spec.fields[n].kind) for n in names}
        paged = [r for r, _, _ in rows if isinstance(r, PagedRecord)]
        try:
            if len(paged) == len(rows) and self._pixels_of(spec, paged[0]):
                return self._decoded_paged(spec, names, paged, f"split {spec.name!r}", 0, pool)
            tables = [paged_table([r]) if isinstance(r, PagedRecord) else r for r, _, _ in rows]
            joined = pa.concat_tables(tables).combine_chunks().to_batches()
            return self._decoded(spec, names, joined, f"split {spec.name!r}", 0, pool)
        except CodecIOError:
            # the error names its shard and record: the rows decoded one by one (the
            # batch's are not consecutive, nor of one shard)
            for row, path, p in rows:
                one = paged_table([row]) if isinstance(row, PagedRecord) else row
                self._decoded(
                    spec, names, one.to_batches(), f"{path}: split {spec.name!r}", p, pool
                )
            raise

    def _pixels_of(self, spec: SplitSpec, record: PagedRecord) -> bool:
        """Whether every image ``record`` holds is a field of pixels stored encoded
        (decoded from its bytes directly), not one kept as its encoded bytes."""
        encodings = self.encodings[spec.name]
        return all(
            encodings[n].arrow == "image" and encodings[n].encoding != "image"
            for n in record.images
        )

    def _decoded_paged(
        self,
        spec: SplitSpec,
        names: list[str],
        records: list[PagedRecord],
        where: str,
        first: int,
        pool: Executor,
    ) -> Batch:
        """Records read by page decoded as one batch: each image from the view of its
        page (no Arrow array of them, no copy), the other fields from their rows."""
        kept = pa.concat_tables([r.kept for r in records]).combine_chunks()
        out: Batch = {}
        for name in names:
            if name in records[0].images:
                s = self.encodings[spec.name][name]
                views = [r.images[name] for r in records]
                # PNGs are decoded from the views; a lossy codec is given bytes
                blobs = [bytes(v) for v in views] if s.lossy else cast(list[bytes], views)
                out[name] = decode_pixel_column(
                    spec.fields[name], blobs, s.lossy, f"{where}, field {name!r}", first, pool
                )
            else:
                arr = kept.column(name).combine_chunks()
                out[name] = self.column(spec, name, arr, f"{where}, field {name!r}", first, pool)
        return out

    def _bounds(self, path: str, pf: pq.ParquetFile) -> np.ndarray:
        """The first row of each row group of ``path`` and its row count, kept."""
        bounds = self._group_bounds.get(path)
        if bounds is None:
            meta = pf.metadata
            sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            bounds = self._group_bounds[path] = np.cumsum([0, *sizes], dtype=np.int64)
        return bounds

    def _plan(
        self, pf: pq.ParquetFile, path: str, g: int, names: list[str], rows: int
    ) -> GroupPlan:
        """Row group ``g``'s :func:`.pages.group_plan`, made (its checks run) once per
        reader and process, not at every read of the group."""
        key = (path, g, tuple(names), rows)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = group_plan(pf, path, g, names, rows)
        return plan

    def _kept(self, path: str) -> pq.ParquetFile:
        """``path`` opened once per process for reads at positions (closed with the reader)."""
        if self._pid != os.getpid():
            self._kept_files, self._pid = {}, os.getpid()
        pf = self._kept_files.get(path)
        if pf is None:
            pf = self._kept_files[path] = self._open(path)
        return pf

    def close(self) -> None:
        if self._pid == os.getpid():
            for pf in self._kept_files.values():
                pf.close()
        self._kept_files = {}
        self._page_rows.close()
        super().close()

    def read_shard(
        self,
        spec: SplitSpec,
        names: list[str],
        shard: ShardFile,
        lo: int,
        hi: int,
        rows: int,
        pool: Executor,
    ) -> Iterator[Batch]:
        """Records ``lo:hi`` of ``shard``: only the row groups that hold them are read, each
        streamed in bounded batches (:func:`.pages.iter_group`: its rows and decoded bytes
        checked against its footer). Small groups' rows are gathered up to ``rows`` (or
        :data:`.pages.BATCH_BYTES` stored) before they are decoded: one decode a batch,
        not one per group of ten tiles."""
        pf = self._open(shard.path)
        where = f"{shard.path}: split {spec.name!r}"
        try:
            self.check_count(shard, pf.metadata.num_rows)
            pending: list[pa.RecordBatch] = []
            start = held = 0
            for s, piece in self._pieces(pf, shard.path, names, lo, hi, rows):
                if not pending:
                    start = s
                pending.append(piece)
                held += piece.nbytes
                if sum(p.num_rows for p in pending) >= rows or held >= BATCH_BYTES:
                    yield self._decoded(spec, names, pending, where, start, pool)
                    pending, held = [], 0
            if pending:
                yield self._decoded(spec, names, pending, where, start, pool)
        finally:
            pf.close()

    def _pieces(
        self, pf: pq.ParquetFile, path: str, names: list[str], lo: int, hi: int, rows: int
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """The rows ``lo:hi`` of ``pf`` as (first row, batch), group by group."""
        first = 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if first < hi and first + n > lo:
                pos = first
                plan = self._plan(pf, path, g, names, rows)
                for part in iter_group(pf, path, g, names, rows, plan):
                    s, e = max(lo, pos), min(hi, pos + part.num_rows)
                    if s < e:
                        yield s, part.slice(s - pos, e - s)
                    pos += part.num_rows
            first += n

    def _decoded(
        self,
        spec: SplitSpec,
        names: list[str],
        pieces: list[pa.RecordBatch],
        where: str,
        first: int,
        pool: Executor,
    ) -> Batch:
        """Consecutive rows from ``pieces`` (records ``first...``) decoded as one batch."""
        if len(pieces) == 1:
            columns = {name: pieces[0].column(name) for name in names}
        else:
            table = pa.Table.from_batches(pieces).combine_chunks()
            columns = {name: table.column(name).chunk(0) for name in names}
        return {
            name: self.column(spec, name, arr, f"{where}, field {name!r}", first, pool)
            for name, arr in columns.items()
        }

    def column(
        self, spec: SplitSpec, name: str, arr: Any, where: str, first: int, pool: Executor
    ) -> Column:
        """Field ``name`` of records ``first...`` from ``arr``, pixels decoded on ``pool``."""
        s, field = self.encodings[spec.name][name], spec.fields[name]
        col = from_arrow(s.stored(field), s.arrow, arr, where, first)
        if s.encoding == "onehot":  # the class index of each record, back to its row
            if not is_one_hot(field, len(s.class_names or ())):  # the manifest disagrees
                raise CodecIOError(f"{where}: stored as one-hot, but not a one-hot field")
            return to_one_hot(np.asarray(col), field.shape[0], field.dtype, where, first)
        if not isinstance(col, VarColumn) or s.arrow != "image" or s.encoding == "image":
            return col
        # PNGs read in place (dstore's decoder takes any buffer): no copy of each record
        blobs = col.to_bytes_list() if s.lossy else _views(col)
        return decode_pixel_column(field, blobs, s.lossy, where, first, pool)

    def describe(self) -> list[str]:
        return [
            f"{split}: {len(shards)} shard(s); first has "
            f"{len(self._groups(shards[0])) if shards else 0} row group(s)"
            for split, shards in self.shards.items()
        ]

    # ------------------------------------------------------------ files of others

    def scan_split(
        self, split: str, paths: list[str]
    ) -> tuple[dict[str, FieldSpec], list[ShardFile]]:
        files = [self._open(p) for p in paths]
        try:
            schema = files[0].schema_arrow
            for p, pf in zip(paths[1:], files[1:], strict=True):
                if not pf.schema_arrow.remove_metadata().equals(schema.remove_metadata()):
                    raise SchemaError(f"{p}: columns differ from those of {paths[0]}")
            fields, mapped, notes = arrow_fields(
                schema,
                paths[0],
                self.drop_unmapped,
                lambda name, depth: list_axes(_column(files, paths, name), depth),
                lambda name: _image_encoding(files, paths, name),
            )
            self.notes.extend(notes)
            self.encodings[split] = {
                n: Storage(e, class_names=c) for n, (_, e, c) in mapped.items()
            }
            counts = [pf.metadata.num_rows for pf in files]
            return fields, [ShardFile(p, n) for p, n in zip(paths, counts, strict=True)]
        finally:
            for pf in files:
                pf.close()


def _views(col: VarColumn) -> list[bytes]:
    """Each record's bytes as a view into ``col``'s buffer (typed as the bytes it reads as)."""
    view = np.ascontiguousarray(col.values, np.uint8).data
    o = col.offsets.tolist()
    return cast(list[bytes], [view[o[i] : o[i + 1]] for i in range(len(col))])


def _column(files: list[pq.ParquetFile], paths: list[str], name: str) -> Iterator[pa.Array]:
    """Column ``name`` of every row group of ``files``, in bounded batches."""
    for pf, path in zip(files, paths, strict=True):
        for g in range(pf.metadata.num_row_groups):
            for part in iter_group(pf, path, g, [name], _SCAN_ROWS):
                yield part.column(0)


def _image_encoding(files: list[pq.ParquetFile], paths: list[str], name: str) -> str:
    """What the first Image's bytes are (PNG, JPEG, ...): a field has one encoding; a
    file that does not read is one line naming it."""
    for pf, path in zip(files, paths, strict=True):
        try:
            for batch in pf.iter_batches(batch_size=1, columns=[name]):
                if len(batch) and (blob := batch.column(0).field("bytes")[0].as_py()):
                    return image_format(blob) or "png"
        except (pa.ArrowException, OSError) as e:
            raise CodecIOError(f"{path}: column {name!r} does not read: {_one_line(e)}") from None
    return "png"
