"""WebDataset: a folder of tar shards of samples, plus dstore's manifest.

Layout written (``data.wds/``)::

    train-000000.tar    samples <key>.<field>.<ext>, about ``shard_mb`` per shard
    ...
    dstore.json         schema, each field's member suffix and encoding, shards + sha256

``webdataset.WebDataset("data.wds/train-{000000..000003}.tar").decode("rgb8")``
reads every field as written (:mod:`.encodings` has the table). dstore reads
its own folders back exactly (the manifest keeps dtypes and shapes) and
anyone's tars by inspection (:mod:`.reader`); the tar bytes are the
standard library's (:mod:`.tario`), deterministic, never extracted.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ... import fs, links
from ...errors import SchemaError
from ...model import Bytes, Image, Ragged, String, StringList, Tensor, names
from ...model.schema import Batch, Schema
from ...sharding import ShardedCodec
from ..base import Reader, Shard, ShardWriter, is_regular_file, read_at
from . import tario
from .encodings import choose_encoding
from .options import WebDatasetOptions
from .reader import WebDatasetReader
from .writer import FORMAT_ID, WebDatasetShardWriter, shard_file

__all__ = ["WebDatasetCodec", "WebDatasetOptions"]


class WebDatasetCodec(ShardedCodec):
    """WebDataset tar shards (``<split>-000000.tar``), written and read without webdataset."""

    name = "webdataset"
    extensions = (".wds", ".tar")
    shard_suffix = ".tar"
    supports_urls = True
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # PNG/JPEG bytes are members as they came
    bfloat16_as = "float32"  # .npy has no bfloat16 without pickle: widened, exact
    Options = WebDatasetOptions

    format_id = FORMAT_ID

    @classmethod
    def owns_file(cls, path: str) -> bool:
        """A file starting with a tar header."""
        return is_regular_file(path) and tario.is_tar_header(read_at(path, 0, tario.BLOCK))

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's (as TFRecord)
            links.check_store(path, self.follow_links, "folder")
        return WebDatasetReader(path, self.options.workers)

    def record_sizes(self, writer: Any, split: str, records: Batch) -> list[int]:
        return [len(r) for r in writer.encode_chunk(writer.schema.splits[split], 0, records)]

    def name_shards(self, plan: list[Shard]) -> list[Shard]:
        """``<split>-000000.tar``: six digits, WebDataset's brace patterns."""
        return [dataclasses.replace(s, file=shard_file(s.split, s.index)) for s in plan]

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        return WebDatasetShardWriter(schema, self.options, plan)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        for split in schema.splits.values():
            if split.count and not split.fields:
                raise SchemaError(
                    f"webdataset: split {split.name!r} has records but no fields: a sample "
                    "of no members cannot be stored in a tar"
                )
            members = [
                (n, choose_encoding(f, self.options.lossy()).suffix)
                for n, f in split.fields.items()
            ]
            names.check_case_distinct(
                members,
                f"webdataset: split {names.shown(split.name)}: fields",
                "the webdataset library lowercases member suffixes",
            )
