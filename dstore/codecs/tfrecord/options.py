"""TFRecord's options (``-o``): the image choices every image format takes, compression, and the feature names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ...images.options import (
    ImageOptions,
    image_codec_option,
    png_level_option,
    quality_option,
    workers_option,
)
from ..example.options import example_images_option, feature_rename_option


@dataclass(frozen=True)
class TFRecordOptions(ImageOptions):
    #: old option names, read as the new ones with a warning
    RENAMED: ClassVar[dict[str, str]] = {"image_format": "image_codec"}

    shard_mb: float = field(
        default=256.0, metadata={"help": "target shard size in MiB (TFDS aims at 64 MiB - 1 GiB)"}
    )
    compression: str = field(
        default="none",
        metadata={"help": 'none or gzip (TensorFlow: compression_type="GZIP")'},
    )
    png_level: str = png_level_option()
    images: tuple[str, ...] | None = example_images_option()
    rename: dict[str, str] = feature_rename_option()  # noqa: RUF009 - a fresh dict each
    image_codec: str = image_codec_option(ImageOptions.IMAGE_CODECS)
    quality: int = quality_option()
    workers: int = workers_option()

    def validate(self) -> None:
        if self.compression not in ("none", "gzip"):
            raise ValueError(
                f"tfrecord: compression must be none or gzip. Got {self.compression!r} instead."
            )
        self.check_image_options("tfrecord")

    def image_set(self) -> set[str] | None:
        """The fields stored as PNG, or None: every image-like field."""
        return None if self.images is None else set(self.images)

    def renames(self) -> dict[str, str]:
        """Field name -> feature name, for the fields renamed."""
        return dict(self.rename)


# ------------------------------------------------------------------------- writer
