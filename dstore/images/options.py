"""The image options every format that encodes pixels shares, declared once here:
``image_codec``, ``quality``, ``png_level`` and ``workers`` (:func:`image_codec_option`,
:func:`quality_option`, :func:`png_level_option`, :func:`workers_option`), the one
check of them all (:meth:`ImageOptions.check_image_options`) and the lossy encoding
they choose (:meth:`ImageOptions.lossy`).

A format opts in: its frozen options dataclass takes the :class:`ImageOptions`
mixin, says which encodings it stores (``IMAGE_CODECS``) and which value means
"no lossy encoding" (``LOSSLESS``: ``png`` where pixels become PNGs, ``none`` in the
array stores), and declares each field with the factory, keeping the field's place
among its own options (``dstore formats`` lists them in order).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, ClassVar

from ..errors import SchemaError, UnsupportedDtypeError
from ..model import Image, Tensor
from ..model.schema import FieldSpec, SplitSpec
from ..options import option
from .imagecodec import LOSSY_FORMATS, LossyImage, check_quality, is_image_like, record_channels

__all__ = [
    "NAMED_PNG_LEVELS",
    "PNG_LEVEL_HELP",
    "ImageOptions",
    "check_images_named",
    "check_pixels",
    "check_png_level",
    "image_codec_option",
    "png_level_option",
    "quality_option",
    "stores_pixels",
    "workers_option",
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


#: the ``png_level`` names besides zlib's 0-9, fastest first (encoders: ``png.png_encoder``)
NAMED_PNG_LEVELS = ("fastest", "fast", "balanced", "small")

#: the ``png_level`` option's help, the same in every format that has it
PNG_LEVEL_HELP = (
    "fast (the default: fpng in two passes, UP rows: ~1.10x TensorFlow's sizes on photos, "
    "~1.2x on satellite tiles; gray/16-bit: UP filter + libdeflate 1), fastest (fpng in one "
    "pass: ~1.7x faster, ~6% larger), balanced (SUB/UP rows + libdeflate 1: ~1.05x "
    "TensorFlow's sizes, satellite tiles too, 1/4-1/3 of fast's speed), small (libpng's "
    "filters + libdeflate: Pillow's sizes) or libpng zlib level 0-9 (6: TensorFlow's sizes)"
)


def check_png_level(level: object, codec: str) -> None:
    """One of :data:`NAMED_PNG_LEVELS` or a zlib level 0..9."""
    text = str(level)
    if text not in NAMED_PNG_LEVELS and not (text.isdigit() and 0 <= int(text) <= 9):
        raise ValueError(
            f"{codec}: png_level must be {', '.join(NAMED_PNG_LEVELS)} or 0..9. "
            f"Got {text!r} instead."
        )


#: what each ``image_codec`` value does, for the option's help
_CODEC_HELP = {
    "png": "png (lossless)",
    "none": "none (stored as arrays, lossless)",
    "jpeg": "jpeg",
    "webp": "webp",
    "jxl": "jxl",
}


def image_codec_option(choices: Sequence[str], default: str = "png") -> Any:
    """The ``image_codec`` field of a format storing raw image fields as one of ``choices``."""
    lossy = [c for c in choices if c in LOSSY_FORMATS]
    text = ", ".join(_CODEC_HELP[c] for c in choices if c not in lossy)
    if lossy:
        text += f" or {'/'.join(lossy)} (lossy, decoded to pixels on read)"
    return option(default, f"raw image fields as {text}")


def quality_option() -> Any:
    """The ``quality`` field: of the lossy encodings, ignored by lossless ones."""
    return option(90, "quality 1..100 of jpeg/webp/jxl images (lossless encodings ignore it)")


def png_level_option() -> Any:
    """The ``png_level`` field of a format whose pixels become PNGs."""
    return option("fast", PNG_LEVEL_HELP)


def workers_option() -> Any:
    """The ``workers`` field: threads (or processes, for fpng) encoding a shard's images."""
    return option(0, "threads (worker processes for fpng PNG) encoding images; 0 = one per core")


class ImageOptions:
    """Options with ``image_codec`` and ``quality`` and, where pixels become PNGs of a
    chosen level, ``png_level``; with ``shard_mb`` for sharded formats."""

    #: the ``image_codec`` values this format stores
    IMAGE_CODECS: ClassVar[tuple[str, ...]] = ("png", *LOSSY_FORMATS)
    #: the ``image_codec`` value that stores pixels without loss
    LOSSLESS: ClassVar[str] = "png"

    image_codec: str
    quality: int

    def lossy(self) -> LossyImage | None:
        """The lossy encoding raw image fields take, None for the lossless one."""
        if self.image_codec == self.LOSSLESS:
            return None
        return LossyImage(self.image_codec, self.quality)

    def check_image_options(self, codec: str) -> None:
        """``shard_mb`` (if any), ``png_level`` (if any), ``image_codec`` (one of
        ``IMAGE_CODECS``) and ``quality``, each refused in one line starting with ``codec``."""
        shard_mb = getattr(self, "shard_mb", None)
        if shard_mb is not None and shard_mb <= 0:
            raise ValueError(f"{codec}: shard_mb must be > 0. Got {shard_mb} instead.")
        if self.image_codec not in self.IMAGE_CODECS:
            raise ValueError(
                f"{codec}: image_codec must be one of {', '.join(self.IMAGE_CODECS)}. "
                f"Got {self.image_codec!r} instead."
            )
        if hasattr(self, "png_level"):
            check_png_level(self.png_level, codec)
        check_quality(self.quality, codec)
