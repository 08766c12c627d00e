"""What the options of formats that encode pixels share (``-o image_codec=``, ``quality``,
``png_level``, ``shard_mb``): the checks and the lossy encoding they choose.

A mixin, not a dataclass base: each format's frozen options dataclass keeps its
own fields, their order, defaults and help (``dstore formats`` lists them), and
calls :meth:`ImageOptions.check_image_options` from its ``validate``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..errors import SchemaError, UnsupportedDtypeError
from ..model import Image, Tensor
from ..model.schema import FieldSpec, SplitSpec
from .imagecodec import LossyImage, check_quality, is_image_like, record_channels

__all__ = [
    "PNG_LEVEL_HELP",
    "ImageOptions",
    "check_images_named",
    "check_pixels",
    "check_png_level",
    "stores_pixels",
]


def stores_pixels(spec: FieldSpec, images: Collection[str] | None) -> bool:
    """Whether a field's raw pixels are stored as encoded images: the fields ``-o images=``
    names, else (``images`` None) raw Images and image-like tensors."""
    if images is not None:
        return spec.name in images
    kind = spec.kind
    return (isinstance(kind, Image) and kind.encoding == "raw") or (
        isinstance(kind, Tensor) and is_image_like(spec)
    )


def check_images_named(images: Collection[str] | None, split: SplitSpec, where: str) -> None:
    """Refuse an ``-o images=`` that names fields the split does not have."""
    if images is not None and (unknown := set(images) - set(split.fields)):
        raise SchemaError(f"{where}: images= names unknown field(s) {sorted(unknown)}")


def check_pixels(spec: FieldSpec, where: str) -> None:
    """Refuse a field stored as images that is not one: (H, W) or (H, W, 1..4) of uint8/uint16."""
    kind = spec.kind
    channels = kind.channels if isinstance(kind, Image) else record_channels(spec.shape)
    if spec.dtype.kind != "u" or spec.dtype.itemsize > 2 or channels not in (0, 1, 2, 3, 4):
        raise UnsupportedDtypeError(
            f"{where}, field {spec.name!r}: {kind.describe()} is not an image "
            "((H, W) or (H, W, 1..4) of uint8/uint16); leave it out of -o images=..."
        )


#: the ``png_level`` option's help, the same in every format that has it
PNG_LEVEL_HELP = (
    "fast (fpng in two passes; gray/16-bit: UP filter + libdeflate 1), fastest (fpng in "
    "one pass: ~1.6x faster, ~6% larger) or libpng zlib level 0-9 (6: TensorFlow's sizes)"
)


def check_png_level(level: object, codec: str) -> None:
    """``fast`` or ``fastest`` (fpng in two passes or one) or a zlib level 0..9."""
    text = str(level)
    if text not in ("fast", "fastest") and not (text.isdigit() and 0 <= int(text) <= 9):
        raise ValueError(f"{codec}: png_level must be fast, fastest or 0..9. Got {text!r} instead.")


class ImageOptions:
    """Options with ``image_codec`` and ``quality`` (``png`` or a lossy format), ``shard_mb``
    and, where pixels become PNGs of a chosen level, ``png_level``."""

    image_codec: str
    quality: int
    shard_mb: float

    def lossy(self) -> LossyImage | None:
        """The lossy encoding raw image fields take, None for PNG."""
        return None if self.image_codec == "png" else LossyImage(self.image_codec, self.quality)

    def check_image_options(self, codec: str, image_codecs: Sequence[str] = ()) -> None:
        """``shard_mb``, ``png_level`` (if any), ``image_codec`` (one of ``image_codecs``
        when given) and ``quality``, each refused in one line starting with ``codec``."""
        if self.shard_mb <= 0:
            raise ValueError(f"{codec}: shard_mb must be > 0. Got {self.shard_mb} instead.")
        if image_codecs and self.image_codec not in image_codecs:
            raise ValueError(
                f"{codec}: image_codec must be one of {', '.join(image_codecs)}. "
                f"Got {self.image_codec!r} instead."
            )
        if hasattr(self, "png_level"):
            check_png_level(self.png_level, codec)
        check_quality(self.quality, codec)
