"""Reading Parquet: dstore's folders (manifest), Hub folders (``data/`` too) and anyone's
files, by row group (``ds[i]`` reads one); foreign columns are mapped by type."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Executor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ... import fs
from ...errors import CodecIOError, SchemaError
from ...model import Bytes, Image, String, StringList, Tensor
from ...model.infer import kind_of_axes
from ...model.schema import Batch, FieldSpec, SplitSpec
from ...sharding import ShardedDirectoryReader, ShardFile, group_ranges, group_slices
from .._pixels import image_format
from ..base import RANGE_BYTES
from .arrow import Storage, from_arrow

__all__ = ["ParquetReader"]


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())  # pyarrow's text can span lines (thrift's end in one)


def open_parquet(path: str) -> pq.ParquetFile:
    """``path`` opened by pyarrow; anything unreadable is one line naming it."""
    try:
        return pq.ParquetFile(fs.open_binary(path) if fs.is_url(path) else path)
    except (pa.ArrowException, OSError) as e:
        raise CodecIOError(f"{path}: not a readable Parquet file: {_one_line(e)}") from None


class ParquetReader(ShardedDirectoryReader):
    format_id = "dstore-parquet"
    codec_name = "parquet"
    file_pattern = r"\.parquet$"
    field_encoding = Storage

    def __init__(self, path: str, workers: int = 0, drop_unmapped: bool = False) -> None:
        self.encodings: dict[str, dict[str, Storage]] = {}
        self.drop_unmapped = drop_unmapped
        self.notes: list[str] = []
        super().__init__(path, workers)

    def find_files(self, path: str) -> list[str]:
        """A folder's ``*.parquet`` files, else those of its ``data/`` (the Hub's layout)."""
        data = fs.join(path, "data")
        if (
            fs.isdir(path)
            and fs.isdir(data)
            and not any(f.endswith(".parquet") for f in fs.listdir(path))
        ):
            return super().find_files(data)
        return super().find_files(path)

    def _groups(self, shard: ShardFile) -> list[Any]:
        pf = open_parquet(shard.path)
        try:
            return [pf.metadata.row_group(g) for g in range(pf.metadata.num_row_groups)]
        finally:
            pf.close()

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        """Whole row groups, gathered to about ``target_bytes`` (uncompressed) per range."""
        self.split(split)
        return group_ranges(
            (
                [(g.num_rows, g.total_byte_size) for g in self._groups(shard)]
                for shard in self.shards[split]
            ),
            target_bytes,
        )

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
        """Records ``lo:hi`` of ``shard``: only the row groups that hold them are read."""
        pf = open_parquet(shard.path)
        try:
            self.check_count(shard, pf.metadata.num_rows)
            groups = [pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)]
            read = -1
            for g, first, s, e in group_slices(groups, lo, hi, rows):
                if g != read:
                    try:
                        table, read = pf.read_row_group(g, columns=names), g
                    except (pa.ArrowException, OSError) as err:
                        reason = _one_line(err)
                        raise CodecIOError(
                            f"{shard.path}: row group {g} does not read: {reason}"
                        ) from None
                part = table.slice(s - first, e - s)
                where = f"{shard.path}: split {spec.name!r}, field"
                yield {
                    n: from_arrow(
                        spec.fields[n],
                        self.encodings[spec.name][n],
                        part.column(n),
                        f"{where} {n!r}",
                        s,
                        pool,
                    )
                    for n in names
                }
        finally:
            pf.close()

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
        """Fields of files dstore did not write, from their Arrow types and ``huggingface``
        metadata; a column of no kind is refused by name (or dropped: ``drop_unmapped``)."""
        files = [open_parquet(p) for p in paths]
        try:
            schema = files[0].schema_arrow
            for p, pf in zip(paths[1:], files[1:], strict=True):
                if not pf.schema_arrow.remove_metadata().equals(schema.remove_metadata()):
                    raise SchemaError(f"{p}: columns differ from those of {paths[0]}")
            try:
                raw = (schema.metadata or {}).get(b"huggingface")
                features = json.loads(raw)["info"]["features"] if raw else {}
            except (ValueError, KeyError, TypeError):
                features = {}
            fields: dict[str, FieldSpec] = {}
            self.encodings[split] = {}
            for f in schema:
                feature = features.get(f.name) if isinstance(features, dict) else None
                hf_type = feature.get("_type") if isinstance(feature, dict) else None
                kind, storage, attrs = _field(f.name, f.type, hf_type, feature, files)
                if kind is None:
                    what = f"{paths[0]}: column {f.name!r} is {storage}, which dstore cannot map"
                    if not self.drop_unmapped:
                        raise SchemaError(f"{what}; drop such columns with -o drop_unmapped=true")
                    self.notes.append(f"{what}: dropped")
                    continue
                fields[f.name] = FieldSpec(f.name, kind, attrs=attrs)
                self.encodings[split][f.name] = storage
            return fields, [
                ShardFile(p, pf.metadata.num_rows) for p, pf in zip(paths, files, strict=True)
            ]
        finally:
            for pf in files:
                pf.close()


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _texty(t: pa.DataType) -> type | None:
    t = t.value_type if pa.types.is_dictionary(t) else t
    if any(f(t) for f in (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)):
        return String
    binary = (
        pa.types.is_binary,
        pa.types.is_large_binary,
        pa.types.is_fixed_size_binary,
        pa.types.is_binary_view,
    )
    return Bytes if any(f(t) for f in binary) else None


def _scalar(t: pa.DataType) -> np.dtype | None:
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.dtype(t.to_pandas_dtype())
    return None


def _axes(files: list[pq.ParquetFile], name: str, depth: int) -> list[int | None]:
    """Per list level: the one length every entry has, or None when they vary (a read
    of the column, row group by row group; an empty level counts as length 0)."""
    seen: list[set[int]] = [set() for _ in range(depth)]
    for pf in files:
        for g in range(pf.metadata.num_row_groups):
            arr = pf.read_row_group(g, columns=[name]).column(0).combine_chunks()
            for level in range(depth):
                if pa.types.is_fixed_size_list(arr.type):
                    seen[level].add(arr.type.list_size)
                elif len(arr):
                    lengths = arr.value_lengths().drop_null().to_numpy(zero_copy_only=False)
                    seen[level].update(int(n) for n in np.unique(lengths))
                arr = arr.flatten()
    return [next(iter(s)) if len(s) == 1 else (0 if not s else None) for s in seen]


def _field(
    name: str, t: pa.DataType, hf_type: Any, feature: Any, files: list[pq.ParquetFile]
) -> tuple[Any, Any, dict[str, Any]]:
    """(kind, storage, attrs) of a foreign column, or (None, why, {}) when it has no kind."""
    if pa.types.is_struct(t):
        if {t.field(i).name for i in range(t.num_fields)} != {"bytes", "path"} or hf_type not in (
            None,
            "Image",
        ):
            return None, f"a struct ({hf_type or t})", {}
        first = next(  # the first Image's bytes say what the field holds (PNG, JPEG...)
            (
                blob
                for pf in files
                for batch in pf.iter_batches(batch_size=1, columns=[name])
                if len(batch) and (blob := batch.column(0).field("bytes")[0].as_py())
            ),
            None,
        )
        encoding = (image_format(first) if first else None) or "png"
        return Image(np.dtype(np.uint8), None, None, None, encoding), Storage("image"), {}
    if (kind := _texty(t)) is not None:
        return kind(), Storage("string" if kind is String else "binary"), {}
    if (dtype := _scalar(t)) is not None:
        names = feature.get("names") if hf_type == "ClassLabel" else None
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            user = {"class_names": {"json": names}}
            return Tensor(dtype), Storage("value", class_names=tuple(names)), {"user": user}
        return Tensor(dtype), Storage("value"), {}
    if not _is_list(t):
        return None, str(t), {}
    depth, inner = 0, t
    while _is_list(inner):
        inner, depth = inner.value_type, depth + 1
    if (text := _texty(inner)) is not None:
        if depth != 1:
            return None, f"lists of {inner} nested {depth} deep", {}
        return StringList(text is String), Storage("strings"), {}
    if (dtype := _scalar(inner)) is None:
        return None, f"lists of {inner}", {}
    numeric = kind_of_axes(dtype, _axes(files, name, depth))
    if numeric is None:
        return None, "lists whose length varies below their first axis", {}
    return numeric, Storage("value"), {}
