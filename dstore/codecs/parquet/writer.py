"""Records -> Parquet shards: pyarrow's ParquetWriter writing row groups into the shard
file the sharded-directory container (:mod:`dstore.sharding`) commits and hashes."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...abc import Shard
from ...errors import DstoreError
from ...images.options import check_images_named, check_pixels, stores_pixels
from ...images.pixels import encode_pixels, image_libraries
from ...images.png import holds_gil, png_encoder
from ...model.arrow import arrow_encoding, arrow_schema, arrow_table, batch_to_arrow, is_list
from ...model.labels import check_labels, from_one_hot, is_one_hot, label_field
from ...model.schema import Batch, FieldSpec, Schema
from ...sharding import ShardedDirectoryWriter, cut_groups, encode_chunks
from . import PIXEL_ENCODINGS, ParquetOptions, Storage

__all__ = ["ParquetShardWriter", "column_encodings", "storages", "written_encodings"]


def storages(
    schema: Schema, options: ParquetOptions, check: bool = False
) -> dict[str, dict[str, Storage]]:
    """Every field's storage, per split; with ``check``, fields the options cannot store
    as asked are refused before a byte is written."""
    names = options.class_names
    label = label_field(schema, options.label_field, "parquet", len(names)) if names else None
    lossy = options.lossy()
    out: dict[str, dict[str, Storage]] = {}
    for split in schema.splits.values():
        out[split.name] = encs = {}
        where = f"parquet: split {split.name!r}"
        if check:
            check_images_named(options.images, split, where)
        for name, spec in split.fields.items():
            encoding = arrow_encoding(spec)
            if encoding != "image" and stores_pixels(spec, options.images):
                encs[name] = Storage(lossy.format, lossy.quality) if lossy else Storage("png")
                if check:
                    check_pixels(spec, where)
                    if lossy is not None:
                        lossy.check_field(spec, where)
            elif name == label:
                one_hot = is_one_hot(spec, len(names or ()))
                encs[name] = Storage("onehot" if one_hot else encoding, class_names=names)
            else:
                encs[name] = Storage(encoding)
    return out


def written_encodings(spec: FieldSpec) -> set[str]:
    """Every storage :func:`storages` gives ``spec`` whatever the options: its Arrow
    encoding, one-hot rows as class indexes, or pixels as an image format when it is an
    image (what a manifest may say)."""
    out = {arrow_encoding(spec)}
    if len(spec.shape) == 1 and is_one_hot(spec, spec.shape[0]):
        out.add("onehot")
    try:
        check_pixels(spec, "parquet")
    except DstoreError:  # no image: never stored as one
        return out
    return out | set(PIXEL_ENCODINGS) if out != {"image"} else out


def hf_feature(t: pa.DataType, s: Storage) -> dict[str, Any]:
    """The column's feature as ``datasets`` writes it in the ``huggingface`` metadata:
    an Image, a ClassLabel, else its Arrow type as Lists (``length`` if fixed) of Values."""
    if s.arrow == "image":
        return {"_type": "Image"}
    if s.class_names is not None:
        return {"names": list(s.class_names), "_type": "ClassLabel"}
    if is_list(t):
        size = {"length": t.list_size} if pa.types.is_fixed_size_list(t) else {}
        return {"feature": hf_feature(t.value_type, Storage("value")), **size, "_type": "List"}
    dtype = t if t in (pa.string(), pa.binary()) else np.dtype(t.to_pandas_dtype()).name
    return {"dtype": str(dtype), "_type": "Value"}


def leaf_paths(schema: pa.Schema) -> list[str]:
    """The Parquet leaf columns ``schema`` is written as (``x.bytes``, ``y.list.element``),
    as pyarrow's writer names them: read from the footer of an empty file it wrote."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    meta = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
    return [meta.schema.column(c).path for c in range(meta.num_columns)]


def column_encodings(
    schema: pa.Schema, encs: dict[str, Storage], options: ParquetOptions
) -> dict[str, Any]:
    """pyarrow's ``compression``, ``compression_level`` and ``use_dictionary`` per leaf
    column: an Image's encoded bytes are stored plain and uncompressed (PNG, JPEG and WebP
    do not compress: +0.5% on photo tiles, and a read of them is a copy, not a
    decompression and a dictionary's gather: docs/benchmarks.md), the rest as asked."""
    images = {f"{n}.bytes" for n, s in encs.items() if s.arrow == "image"}
    level = None if options.compression in ("none", "snappy") else options.compression_level
    paths = leaf_paths(schema)
    rest = [p for p in paths if p not in images]
    return {
        "compression": {p: "none" if p in images else options.compression for p in paths},
        "compression_level": {p: level for p in rest} if level is not None else None,
        "use_dictionary": rest,
    }


#: a page closes once it holds this many bytes (pyarrow's default: 1 MiB)
IMAGE_PAGE_BYTES = 8 << 10


def page_sizes(encs: dict[str, Storage]) -> dict[str, int]:
    """Pages of at most about :data:`IMAGE_PAGE_BYTES` in a split that stores images, a
    value at a time: a larger image is a page of its own, which a read at a position
    reads alone (:mod:`.rows`) rather than its row group. pyarrow's defaults otherwise."""
    if not any(s.arrow == "image" for s in encs.values()):
        return {}
    return {"data_page_size": IMAGE_PAGE_BYTES, "write_batch_size": 1}


class ParquetShardWriter(ShardedDirectoryWriter):
    """Encodes records to Parquet row groups; picklable (options and storages only)."""

    codec_name = "parquet"

    def __init__(self, schema: Schema, options: ParquetOptions, plan: Sequence[Shard] = ()) -> None:
        self.options = options
        self.storages = storages(schema, options)
        self.arrow = {}
        self.stored = {
            split: {n: encs[n].stored(f) for n, f in schema.splits[split].fields.items()}
            for split, encs in self.storages.items()
        }
        for split, encs in self.storages.items():
            arrow = arrow_schema(self.stored[split], {n: s.arrow for n, s in encs.items()})
            features = {f.name: hf_feature(f.type, encs[f.name]) for f in arrow}
            meta = {"huggingface": json.dumps({"info": {"features": features}})}
            self.arrow[split] = arrow.with_metadata(meta)
        self.workers = options.workers
        super().__init__(schema, plan, None)

    def gil_bound(self, split: str) -> bool:
        return holds_gil("fast") and any(s.encoding == "png" for s in self.storages[split].values())

    def current_libraries(self) -> dict[str, str]:
        every = [s.lossy or s.encoding for encs in self.storages.values() for s in encs.values()]
        return {"pyarrow": pa.__version__, **image_libraries(every, "fast")}

    def encode_chunk(
        self, split: str, chunk: Batch, png: Any = None, first: int = 0
    ) -> tuple[dict[str, pa.Array], np.ndarray]:
        """A chunk of records as Arrow arrays (pixels encoded), with each record's size;
        ``first``: the split's record the chunk starts at (an error names its record)."""
        png = png or png_encoder("fast")  # UP filter + libdeflate / fpng: deterministic
        fields, encs = self.schema.splits[split].fields, self.storages[split]
        where = f"parquet: split {split!r}"
        encoded = dict(chunk)
        for n, s in encs.items():
            if s.encoding in PIXEL_ENCODINGS:
                encoded[n] = encode_pixels(fields[n], chunk[n], s.lossy.encode if s.lossy else png)
            elif s.encoding == "onehot":
                encoded[n] = from_one_hot(np.asarray(chunk[n]), f"{where}, field {n!r}", first)
            elif s.class_names is not None:
                check_labels(np.asarray(chunk[n]), s.class_names, f"{where}, field {n!r}")
        stored = self.stored[split]
        return batch_to_arrow(stored, {n: s.arrow for n, s in encs.items()}, encoded, where)

    def write_records(
        self, shard: Shard, batches: Iterator[Batch], out: Any
    ) -> Generator[int, None, None]:
        """Row groups of at most ``row_group_rows`` records / ``row_group_mb`` written by
        pyarrow into ``out`` (never closed here); images encoded on all cores."""
        opts, png, schema = self.options, png_encoder("fast"), self.arrow[shard.split]
        writer = pq.ParquetWriter(
            pa.PythonFile(out, mode="w"),
            schema,
            **column_encodings(schema, self.storages[shard.split], opts),
            write_statistics=True,
            store_schema=True,
            write_page_checksum=True,  # a CRC per page: a flipped bit is an error on read
            **page_sizes(self.storages[shard.split]),
        )

        def encode(at: int, chunk: Batch) -> tuple[dict[str, pa.Array], np.ndarray]:
            return self.encode_chunk(shard.split, chunk, png, shard.start + at)

        encoded = encode_chunks(batches, encode, opts.workers, "dstore-parquet", ahead=2)
        try:
            for group in cut_groups(encoded, opts.row_group_rows, opts.row_group_mb * 1024**2):
                rows = sum(n for *_, n in group)
                parts = ({k: v.slice(i, n) for k, v in a.items()} for a, i, n in group)
                writer.write_table(arrow_table(schema, parts), row_group_size=rows)
                yield rows
        except BaseException:
            # the shard is discarded: its writer closed now, not by pyarrow's __del__ once
            # ``out`` is closed (an "Exception ignored" write to a closed file)
            writer.is_open = False
            raise
        writer.close()

    def manifest_head(self) -> dict[str, Any]:
        fields = {sp: {n: s.to_json() for n, s in e.items()} for sp, e in self.storages.items()}
        return self.standard_head("dstore-parquet", self.options, fields)
