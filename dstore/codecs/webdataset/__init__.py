"""WebDataset: a folder of tar shards of samples plus dstore's manifest
(docs/formats/webdataset.md); tars dstore did not write are read by inspection."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from ... import fs, links
from ...abc import Reader, Shard, ShardWriter
from ...errors import SchemaError
from ...fs import is_regular_file, read_at
from ...images.options import (
    ImageOptions,
    image_codec_option,
    png_level_option,
    quality_option,
    workers_option,
)
from ...model import Bytes, Image, Ragged, String, StringList, Tensor, names
from ...model.schema import Batch, Schema
from ...options import option
from ...sharding import ShardedCodec
from ...sharding.numbered import numbered_name
from .reader import BLOCK, WebDatasetReader, is_tar_header
from .writer import FORMAT_ID, WebDatasetShardWriter, choose_encoding

__all__ = ["WebDatasetCodec", "WebDatasetOptions"]


@dataclass(frozen=True)
class WebDatasetOptions(ImageOptions):
    shard_mb: float = option(256.0, "target tar shard size in MiB (WebDataset: 100 MB-1 GB)")
    # the encodings WebDataset's image decoder (PIL) reads
    IMAGE_CODECS: ClassVar[tuple[str, ...]] = ("png", "jpeg", "webp")

    image_codec: str = image_codec_option(IMAGE_CODECS)
    quality: int = quality_option()
    png_level: str = png_level_option()
    workers: int = workers_option()

    def validate(self) -> None:
        self.check_image_options("webdataset")


class WebDatasetCodec(ShardedCodec):
    """WebDataset tar shards (``<split>-000000.tar``), written and read without webdataset."""

    name = "webdataset"
    media_type = "application/x-tar"
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
        return is_regular_file(path) and is_tar_header(read_at(path, 0, BLOCK))

    def open_reader(self, path: str) -> Reader:
        if not fs.is_url(path) and os.path.isdir(path):
            # a shard linked out of the folder would be read as this dataset's (as TFRecord)
            links.check_store(path, self.follow_links, "folder")
        return WebDatasetReader(path, self.options.workers, self.follow_links)

    def record_sizes(self, writer: Any, split: str, records: Batch) -> list[int]:
        return [len(r) for r in writer.encode_chunk(writer.schema.splits[split], 0, records)]

    def shard_file(self, split: str, index: int, total: int) -> str:
        return numbered_name(split, index, self.shard_suffix)

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
                (n, choose_encoding(f, self.options.lossy()).at) for n, f in split.fields.items()
            ]
            names.check_case_distinct(
                members,
                f"webdataset: split {names.shown(split.name)}: fields",
                "the webdataset library lowercases member suffixes",
            )
