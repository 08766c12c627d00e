"""ArrayRecord options (``-o KEY=VALUE``): shard size, the library's chunking and
compression, and the Example field encodings shared with TFRecord."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...images.options import (
    ImageOptions,
    image_codec_option,
    png_level_option,
    quality_option,
    workers_option,
)
from ...options import option
from ..example.options import example_images_option, feature_rename_option

__all__ = ["ArrayRecordOptions"]


@dataclass(frozen=True)
class ArrayRecordOptions(ImageOptions):
    shard_mb: float = option(256.0, "target shard size in MiB (TFDS aims at 64 MiB - 1 GiB)")
    group_size: int = option(
        1,
        "records per compressed chunk; 1 (TFDS's and Grain's choice) reads one record "
        "without decompressing its neighbours",
    )
    compression: Literal["zstd", "uncompressed", "brotli", "snappy"] = option(
        "zstd", "how array_record compresses each chunk"
    )
    level: int = option(3, "zstd (-131072..22) or brotli (0..11) level; 3 is array_record's own")
    png_level: str = png_level_option()
    images: tuple[str, ...] | None = example_images_option()
    rename: dict[str, str] = feature_rename_option()  # noqa: RUF009 - a fresh dict each
    image_codec: str = image_codec_option(ImageOptions.IMAGE_CODECS)
    quality: int = quality_option()
    workers: int = workers_option()

    def compressor(self) -> str:
        """What compresses each chunk, for reports ("zstd 3", "uncompressed")."""
        return (
            f"{self.compression} {self.level}"
            if self.compression in ("zstd", "brotli")
            else self.compression
        )

    def validate(self) -> None:
        self.check_image_options("arrayrecord")
        if self.group_size < 1:
            raise ValueError(f"arrayrecord: group_size must be >= 1. Got {self.group_size}.")
        lo, hi = {"zstd": (-131072, 22), "brotli": (0, 11)}.get(self.compression, (0, 0))
        if self.compression in ("zstd", "brotli") and not lo <= self.level <= hi:
            raise ValueError(
                f"arrayrecord: {self.compression} level must be {lo}..{hi}. Got {self.level}."
            )

    def writer_options(self) -> str:
        """The ``ArrayRecordWriter`` options string: every setting that shapes the bytes
        is explicit, so a newer array_record's defaults cannot change them."""
        level = f":{self.level}" if self.compression in ("zstd", "brotli") else ""
        # max_parallelism:1: with "auto" the writer starts a thread pool that a forked
        # process (a DataLoader worker) inherits broken: its first ArrayRecordReader
        # then dies with SIGSEGV. Shards are written in parallel by dstore already.
        return (
            f"group_size:{self.group_size},{self.compression}{level},"
            "transpose:false,pad_to_block_boundary:false,max_parallelism:1"
        )
