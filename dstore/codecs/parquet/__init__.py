"""Parquet in the Hugging Face Hub layout (docs/formats/parquet.md): shards with the
``huggingface`` features metadata; a folder of dstore's, a Hub folder, or one file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from ... import fs, links
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.names import check_text_names
from ...model.schema import Batch, Schema
from ...options import option
from ...sharding import ShardedCodec
from .._image_options import ImageOptions
from .._imagecodec import LOSSY_FORMATS
from .._pixels import FieldStorage
from ..base import Reader, Shard, ShardWriter, read_at

__all__ = ["ParquetCodec", "ParquetOptions", "Storage"]

PIXEL_ENCODINGS = ("png", *LOSSY_FORMATS)  # pixels dstore encodes (decoded back on read)


class Storage(FieldStorage):
    """A field's entry in the manifest: one of dstore's Arrow encodings
    (:mod:`dstore.model.arrow`), or pixels stored as Images of PNG or a lossy format."""

    ENCODINGS = ("value", "image", "string", "binary", "strings", *PIXEL_ENCODINGS)

    @property
    def arrow(self) -> str:
        """The Arrow encoding: an Image struct for pixels too."""
        return "image" if self.encoding in PIXEL_ENCODINGS else self.encoding


@dataclass(frozen=True)
class ParquetOptions(ImageOptions):
    shard_mb: float = option(256.0, "target shard size in MiB (the Hub's own shards are ~500)")
    row_group_rows: int = option(100, "most records in a row group (datasets' for images)")
    row_group_mb: float = option(64.0, "a row group ends once its encoded records reach this")
    compression: Literal["zstd", "snappy", "gzip", "none"] = option("zstd", "page compression")
    compression_level: int = option(3, "zstd/gzip level (zstd 1..22)")
    images: tuple[str, ...] | None = option(
        None, "comma-separated fields stored as Images; auto = image-like fields", none="auto"
    )
    image_codec: Literal["png", "jpeg", "webp"] = option("png", "how pixels become Images")
    quality: int = option(90, "quality 1..100 of jpeg/webp images (png ignores it)")
    class_names: tuple[str, ...] | None = option(None, "a label's ClassLabel names", none="none")
    label_field: str | None = option(
        None, "the field class_names describes; auto = the only integer scalar field", none="auto"
    )
    drop_unmapped: bool = option(False, "reading: drop columns of no kind, not refuse them")
    workers: int = option(
        0, "threads (worker processes for fpng PNG) encoding images; 0 = one per core"
    )

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

        return ParquetReader(path, self.options.workers, self.options.drop_unmapped)

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
