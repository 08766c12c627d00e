"""Options of the ``webdataset`` codec (``-o KEY=VALUE``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._image_options import ImageOptions

__all__ = ["IMAGE_CODECS", "WebDatasetOptions"]

#: what raw pixels may become: the encodings WebDataset's image decoder (PIL) reads
IMAGE_CODECS = ("png", "jpeg", "webp")


@dataclass(frozen=True)
class WebDatasetOptions(ImageOptions):
    shard_mb: float = field(
        default=256.0, metadata={"help": "target tar shard size in MiB (WebDataset: 100 MB-1 GB)"}
    )
    image_codec: str = field(
        default="png",
        metadata={"help": "raw image fields as png (lossless), jpeg or webp (lossy)"},
    )
    quality: int = field(default=90, metadata={"help": "quality 1..100 of jpeg/webp images"})
    png_level: str = field(
        default="fast",
        metadata={"help": "fast (UP filter + libdeflate level 1) or zlib level 0-9"},
    )
    workers: int = field(default=0, metadata={"help": "threads encoding images; 0 = one per core"})

    def validate(self) -> None:
        self.check_image_options("webdataset", IMAGE_CODECS)
