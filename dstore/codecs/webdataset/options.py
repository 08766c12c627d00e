"""Options of the ``webdataset`` codec (``-o KEY=VALUE``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._imagecodec import LossyImage, check_quality

__all__ = ["IMAGE_CODECS", "WebDatasetOptions"]

#: what raw pixels may become: the encodings WebDataset's image decoder (PIL) reads
IMAGE_CODECS = ("png", "jpeg", "webp")


@dataclass(frozen=True)
class WebDatasetOptions:
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
        if self.shard_mb <= 0:
            raise ValueError(f"webdataset: shard_mb must be > 0. Got {self.shard_mb} instead.")
        if self.image_codec not in IMAGE_CODECS:
            raise ValueError(
                f"webdataset: image_codec must be one of {', '.join(IMAGE_CODECS)}. "
                f"Got {self.image_codec!r} instead."
            )
        level = str(self.png_level)
        if level != "fast" and not (level.isdigit() and 0 <= int(level) <= 9):
            raise ValueError(f"webdataset: png_level must be fast or 0..9. Got {level!r} instead.")
        check_quality(self.quality, "webdataset")

    def lossy(self) -> LossyImage | None:
        """The lossy encoding raw image fields take, None for PNG."""
        return None if self.image_codec == "png" else LossyImage(self.image_codec, self.quality)
