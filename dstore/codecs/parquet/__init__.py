"""Parquet in the Hugging Face Hub layout (docs/formats/parquet.md): shards with the
``huggingface`` features metadata; a folder of dstore's, a Hub folder, or one file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from ... import fs, links
from ...abc import Reader, Shard, ShardWriter
from ...fs import read_at
from ...images.imagecodec import LOSSY_FORMATS
from ...images.options import ImageOptions, image_codec_option, quality_option, workers_option
from ...images.pixels import FieldStorage
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.names import check_text_names
from ...model.schema import Batch, FieldSpec, Schema
from ...options import option
from ...sharding import ShardedCodec

__all__ = ["ParquetCodec", "ParquetOptions", "Storage"]

PIXEL_ENCODINGS = ("png", *LOSSY_FORMATS)  # pixels dstore encodes (decoded back on read)


class Storage(FieldStorage):
    """A field's entry in the manifest: one of dstore's Arrow encodings
    (:mod:`dstore.model.arrow`), pixels stored as Images of PNG or a lossy format, or
    ``onehot``: one-hot rows stored as the index of their 1, a ``ClassLabel``."""

    ENCODINGS = ("value", "image", "string", "binary", "strings", "onehot", *PIXEL_ENCODINGS)

    @property
    def arrow(self) -> str:
        """The Arrow encoding: an Image struct for pixels too, numbers for class indexes."""
        if self.encoding == "onehot":
            return "value"
        return "image" if self.encoding in PIXEL_ENCODINGS else self.encoding

    def stored(self, spec: FieldSpec) -> FieldSpec:
        """The field as its Arrow column holds it: an int64 class index for one-hot rows."""
        return FieldSpec.tensor(spec.name, np.int64) if self.encoding == "onehot" else spec


@dataclass(frozen=True)
class ParquetOptions(ImageOptions):
    # the encodings the Hub's Image feature (PIL) decodes
    IMAGE_CODECS: ClassVar[tuple[str, ...]] = ("png", "jpeg", "webp")

    shard_mb: float = option(256.0, "target shard size in MiB (the Hub's own shards are ~500)")
    row_group_rows: int = option(100, "most records in a row group (datasets' batches of images)")
    # a shuffled read fetches a whole row group for one record: large records (photo tiles
    # of ~110 kB) get groups of ~10, small ones keep row_group_rows (docs/benchmarks.md)
    row_group_mb: float = option(1.0, "a row group ends once its encoded records reach this")
    compression: Literal["zstd", "snappy", "gzip", "none"] = option(
        "zstd", "page compression (an Image's encoded bytes: none, they do not compress)"
    )
    compression_level: int = option(3, "zstd/gzip level (zstd 1..22)")
    images: tuple[str, ...] | None = option(
        None, "comma-separated fields stored as Images; auto = image-like fields", none="auto"
    )
    image_codec: str = image_codec_option(IMAGE_CODECS)
    quality: int = quality_option()
    class_names: tuple[str, ...] | None = option(
        None, "a label's ClassLabel names (a one-hot label becomes its class index)", none="none"
    )
    label_field: str | None = option(
        None,
        "the field class_names describes; auto = the only integer scalar or one-hot field",
        none="auto",
    )
    drop_unmapped: bool = option(False, "reading: drop columns of no kind, not refuse them")
    workers: int = workers_option()

    def validate(self) -> None:
        self.check_image_options("parquet")
        if self.row_group_mb <= 0:
            raise ValueError(f"parquet: row_group_mb must be > 0. Got {self.row_group_mb}.")
        if self.row_group_rows < 1:
            raise ValueError(f"parquet: row_group_rows must be >= 1. Got {self.row_group_rows}.")
        if self.class_names is not None and len(set(self.class_names)) != len(self.class_names):
            raise ValueError(f"parquet: class_names repeat a name: {list(self.class_names)}")


class ParquetCodec(ShardedCodec):
    """Parquet shards with the Hub's ``huggingface`` features metadata."""

    name = "parquet"
    media_type = "application/x-parquet"
    hub_card = True  # datasets.load_dataset(folder) reads the folder with its README.md
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

        return ParquetReader(
            path, self.options.workers, self.options.drop_unmapped, self.follow_links
        )

    def record_sizes(self, writer: Any, split: str, records: Batch) -> list[int]:
        return [int(n) for n in writer.encode_chunk(split, records)[1]]

    def shard_writer(self, schema: Schema, plan: list[Shard]) -> ShardWriter:
        from .writer import ParquetShardWriter

        return ParquetShardWriter(schema, self.options, plan)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        check_text_names(schema, "parquet", "Parquet")  # Arrow column and shard names
        from .writer import storages

        storages(schema, self.options, check=True)
