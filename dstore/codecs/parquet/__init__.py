"""Parquet in the Hugging Face Hub layout: ``datasets``, pyarrow, pandas and DuckDB read it.

Layout written (``data.parquet/``, a folder)::

    train-00000-of-00002.parquet   shards of about ``shard_mb``, row groups of
    ...                            <= ``row_group_rows`` records / ``row_group_mb``
    dstore.json                    schema, each field's storage, shards (records, sha256)

Each shard's Arrow schema carries the ``huggingface`` metadata ``datasets``
writes (``{"info": {"features": ...}}``): images are ``Image`` structs of PNG
(or JPEG/WebP) bytes, fixed axes ``List(..., length=n)``, ragged axes
``List``, text ``Value("string")``. ``datasets.load_dataset("parquet",
data_files=...)`` reads the shards as the Hub's own; dstore reads them back
exactly (dtypes, shapes, byte orders) from the manifest.

A path that is a regular file is one Parquet file (anyone's); a folder is
dstore's (manifest) or a Hub folder of shards (``data/`` inside it too).
"""

from __future__ import annotations

import os
from typing import Any

from ... import fs, links
from ...errors import SchemaError
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.names import is_utf8_text
from ...model.schema import Batch, Schema
from ...sharding import ShardedCodec
from ..base import Reader, Shard, ShardWriter, read_at
from .options import ParquetOptions

__all__ = ["ParquetCodec", "ParquetOptions"]


class ParquetCodec(ShardedCodec):
    """Parquet shards with the Hub's ``huggingface`` features metadata."""

    name = "parquet"
    extensions = (".parquet",)
    shard_suffix = ".parquet"
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # JPEG/PNG bytes pass through as Image structs
    keeps_empty_rows = True  # list offsets count rows of an empty inner shape
    bfloat16_as = "float32"  # Arrow has no bfloat16: widened exactly, read as float32 elsewhere
    Options = ParquetOptions

    format_id = "dstore-parquet"

    @classmethod
    def owns_file(cls, path: str) -> bool:
        """A file starting and ending ``PAR1``."""
        if read_at(path, 0, 4) != b"PAR1":
            return False
        size = fs.getsize(path)
        return size >= 12 and read_at(path, size - 4, 4) == b"PAR1"

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's (as TFRecord)
            links.check_store(path, self.follow_links, "folder")
        from .reader import ParquetReader

        return ParquetReader(path, self.options.workers, self.options.drop_unmapped)

    def record_sizes(self, writer: Any, split: str, records: Batch) -> list[int]:
        return [int(n) for n in writer.encode_chunk(split, records)[1]]

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        from .writer import ParquetShardWriter

        return ParquetShardWriter(schema, self.options, plan)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        for split in schema.splits.values():
            for name in (split.name, *split.fields):  # Arrow column and shard names: UTF-8
                if not is_utf8_text(name):
                    raise SchemaError(
                        f"parquet: split {split.name!r}, field {name!r}: the name is not valid "
                        "Unicode text (a lone surrogate); rename it before writing Parquet"
                    )
        from .writer import check_storages

        check_storages(schema, self.options)
