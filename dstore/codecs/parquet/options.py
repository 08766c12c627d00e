"""Options of the Parquet codec (``-o KEY=VALUE``): one frozen dataclass.

Row groups are the unit of reading (``ds[i]`` reads one, training workers
split shards by them), so they are kept small enough to stream: at most
``row_group_rows`` records and about ``row_group_mb`` of encoded data,
whichever comes first (256 records of 256x256x3 PNG tiles are ~40 MB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...options import option
from .._image_options import ImageOptions

__all__ = ["ParquetOptions"]


@dataclass(frozen=True)
class ParquetOptions(ImageOptions):
    shard_mb: float = option(256.0, "target shard size in MiB (the Hub's own shards are ~500)")
    row_group_rows: int = option(256, "most records in a row group (the unit of random access)")
    row_group_mb: float = option(64.0, "a row group ends once its encoded records reach this")
    compression: Literal["zstd", "snappy", "gzip", "none"] = option(
        "zstd", "Parquet page compression"
    )
    compression_level: int = option(3, "zstd/gzip level (zstd 1..22)")
    images: tuple[str, ...] | None = option(
        None, "comma-separated fields stored as Hub Images; auto = image-like fields", none="auto"
    )
    image_codec: Literal["png", "jpeg", "webp"] = option(
        "png", "how raw pixels become Image bytes: png (lossless), jpeg or webp (lossy)"
    )
    quality: int = option(90, "quality 1..100 of jpeg/webp images (png ignores it)")
    class_names: tuple[str, ...] | None = option(
        None, "names of the classes of an integer label field (a Hub ClassLabel)", none="none"
    )
    label_field: str | None = option(
        None, "the field class_names describes; auto = the only integer scalar field", none="auto"
    )
    drop_unmapped: bool = option(
        False, "reading: drop columns dstore cannot map (structs, maps, audio) instead of refusing"
    )
    workers: int = option(0, "threads encoding images; 0 = one per core")

    def validate(self) -> None:
        self.check_image_options("parquet")
        if self.row_group_mb <= 0:
            raise ValueError(f"parquet: row_group_mb must be > 0. Got {self.row_group_mb}.")
        if self.row_group_rows < 1:
            raise ValueError(f"parquet: row_group_rows must be >= 1. Got {self.row_group_rows}.")
        if self.class_names is not None and len(set(self.class_names)) != len(self.class_names):
            raise ValueError(f"parquet: class_names repeat a name: {list(self.class_names)}")

    def arrow_compression(self) -> tuple[str, int | None]:
        """pyarrow's ``compression`` and ``compression_level``."""
        if self.compression in ("none", "snappy"):
            return self.compression, None
        return self.compression, self.compression_level
