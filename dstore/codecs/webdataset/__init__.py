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

from ... import fs, links, names
from ...errors import SchemaError
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...schema import Schema
from ...sharding import is_manifest_of, plan_by_size
from .._png import png_encoder
from ..base import Codec, Reader, Shard, ShardWriter, Writer, is_regular_file, read_at
from . import tario
from .encodings import choose_encoding
from .options import WebDatasetOptions
from .reader import WebDatasetReader
from .writer import FORMAT_ID, WebDatasetShardWriter, shard_file

__all__ = ["WebDatasetCodec", "WebDatasetOptions"]

_PLAN_SAMPLE = 64  # records encoded to size the shards


class WebDatasetCodec(Codec):
    """WebDataset tar shards (``<split>-000000.tar``), written and read without webdataset."""

    name = "webdataset"
    extensions = (".wds", ".tar")
    sharded = True
    reads_folders = True
    supports_urls = True
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    keeps_encoded_images = True  # PNG/JPEG bytes are members as they came
    bfloat16_as = "float32"  # .npy has no bfloat16 without pickle: widened, exact
    Options = WebDatasetOptions

    @classmethod
    def owns(cls, path: str) -> bool:
        """A folder with dstore's webdataset manifest, or a file starting with a tar header."""
        if fs.isdir(path):
            return is_manifest_of(path, FORMAT_ID)
        return is_regular_file(path) and tario.is_tar_header(read_at(path, 0, tario.BLOCK))

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's (as TFRecord)
            links.check_store(path, self.follow_links, "folder")
        return WebDatasetReader(path, self.options.workers)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        raise NotImplementedError(
            "webdataset is written shard by shard: use plan_shards and shard_writer"
        )

    def plan_shards(self, schema: Schema, sample: Any) -> list[Shard]:
        """Shards of about ``shard_mb``, sized from the encoded first records, named
        ``<split>-000000.tar`` (six digits, WebDataset's brace patterns)."""
        self.check_schema(schema)
        writer = WebDatasetShardWriter(schema, self.options)
        png = png_encoder(str(self.options.png_level))
        plan = plan_by_size(
            schema,
            sample,
            lambda split, first: [
                len(r) for r in writer.encode_chunk(schema.splits[split], 0, first, png)
            ],
            target_bytes=self.options.shard_mb * 1024 * 1024,
            sample_records=_PLAN_SAMPLE,
            suffix=".tar",
        )
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
