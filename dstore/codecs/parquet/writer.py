"""Records -> Parquet shards: pyarrow's ParquetWriter writing row groups into the shard
file the sharded-directory container (:mod:`dstore.sharding`) commits and hashes."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...model import Bytes, Image, String, StringList
from ...model.labels import check_labels, label_field
from ...model.schema import Batch, Schema
from ...sharding import ShardedDirectoryWriter, cut_groups, encode_chunks
from .._image_options import check_images_named, check_pixels, stores_pixels
from .._pixels import image_libraries
from .._png import png_encoder
from ..base import Shard
from . import ParquetOptions
from .arrow import Storage, arrow_type, hf_feature, to_arrow

__all__ = ["ParquetShardWriter"]

_TEXT = {String: "string", Bytes: "binary", StringList: "strings"}


def storages(
    schema: Schema, options: ParquetOptions, check: bool = False
) -> dict[str, dict[str, Storage]]:
    """Every field's storage, per split; with ``check``, fields the options cannot store
    as asked are refused before a byte is written."""
    label = label_field(schema, options.label_field, "parquet") if options.class_names else None
    lossy = options.lossy()
    out: dict[str, dict[str, Storage]] = {}
    for split in schema.splits.values():
        out[split.name] = encs = {}
        where = f"parquet: split {split.name!r}"
        if check:
            check_images_named(options.images, split, where)
        for name, spec in split.fields.items():
            if isinstance(spec.kind, Image) and spec.kind.encoding != "raw":
                encs[name] = Storage("image")
            elif stores_pixels(spec, options.images):
                encs[name] = Storage(lossy.format, lossy.quality) if lossy else Storage("png")
                if check:
                    check_pixels(spec, where)
                    if lossy is not None:
                        lossy.check_field(spec, where)
            else:
                encoding = _TEXT.get(type(spec.kind), "value")
                names = options.class_names if name == label else None
                encs[name] = Storage(encoding, class_names=names)
    return out


class ParquetShardWriter(ShardedDirectoryWriter):
    """Encodes records to Parquet row groups; picklable (options and storages only)."""

    codec_name = "parquet"

    def __init__(self, schema: Schema, options: ParquetOptions, plan: Sequence[Shard] = ()) -> None:
        self.options = options
        self.storages = storages(schema, options)
        self.arrow = {}
        for split, encs in self.storages.items():
            fields = schema.splits[split].fields
            features = {n: hf_feature(fields[n], s) for n, s in encs.items()}
            self.arrow[split] = pa.schema(
                [pa.field(n, arrow_type(fields[n], s)) for n, s in encs.items()],
                metadata={"huggingface": json.dumps({"info": {"features": features}})},
            )
        super().__init__(schema, plan, None)

    def current_libraries(self) -> dict[str, str]:
        every = [s.lossy or s.encoding for encs in self.storages.values() for s in encs.values()]
        return {"pyarrow": pa.__version__, **image_libraries(every, "fast")}

    def encode_chunk(
        self, split: str, chunk: Batch, png: Any = None
    ) -> tuple[dict[str, pa.Array], np.ndarray]:
        """A chunk of records as Arrow arrays, with each record's encoded size."""
        png = png or png_encoder("fast")  # UP filter + libdeflate / fpng: deterministic
        sizes = np.zeros(len(next(iter(chunk.values()))), np.int64)
        arrays = {}
        for name, s in self.storages[split].items():
            spec = self.schema.splits[split].fields[name]
            where = f"parquet: split {split!r}, field {name!r}"
            t = self.arrow[split].field(name).type
            arrays[name], per_record = to_arrow(spec, s, chunk[name], t, png, where)
            if s.class_names is not None:
                check_labels(np.asarray(chunk[name]), s.class_names, where)
            sizes += per_record
        return arrays, sizes

    def write_records(
        self, shard: Shard, batches: Iterator[Batch], out: Any
    ) -> Generator[int, None, None]:
        """Row groups of at most ``row_group_rows`` records / ``row_group_mb`` written by
        pyarrow into ``out`` (never closed here); images encoded on all cores."""
        opts, png, schema = self.options, png_encoder("fast"), self.arrow[shard.split]
        level = None if opts.compression in ("none", "snappy") else opts.compression_level
        writer = pq.ParquetWriter(
            pa.PythonFile(out, mode="w"),
            schema,
            compression=opts.compression,
            compression_level=level,
            write_statistics=True,
            store_schema=True,
        )
        encoded = encode_chunks(
            batches,
            lambda _, chunk: self.encode_chunk(shard.split, chunk, png),
            opts.workers,
            "dstore-parquet",
            ahead=2,
        )
        for group in cut_groups(encoded, opts.row_group_rows, opts.row_group_mb * 1024 * 1024):
            columns = {
                f.name: pa.chunked_array([a[f.name].slice(i, n) for a, i, n in group], f.type)
                for f in schema
            }
            writer.write_table(
                pa.table(columns, schema=schema), row_group_size=sum(n for *_, n in group)
            )
            yield sum(n for *_, n in group)
        writer.close()

    def manifest_head(self) -> dict[str, Any]:
        fields = {
            split: {name: s.to_json() for name, s in encs.items()}
            for split, encs in self.storages.items()
        }
        return self.standard_head("dstore-parquet", self.options, fields)
