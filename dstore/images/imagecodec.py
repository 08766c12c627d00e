"""Lossy image encodings (JPEG, WebP, JPEG XL) shared by the TFRecord and zarr codecs.

One :class:`LossyImage` is a format and a quality; it encodes one record
``(H, W)`` or ``(H, W, C)`` to bytes and decodes them back to pixels of the
field's record shape (a ``(H, W, 1)`` record is stored as a greyscale image
and comes back as ``(H, W, 1)``). The encoders are imagecodecs': JPEG through
libjpeg-turbo (``jpeg8_encode``: TensorFlow's ``decode_jpeg`` is libjpeg-turbo
too), WebP through libwebp (lossy mode), JPEG XL through libjxl. They release
the GIL, so the codecs run them on a thread pool, like PNG.

What each format takes (checked before anything is written, :func:`check_field`):

====== ====================== ===========================================
format pixels                 channels
====== ====================== ===========================================
jpeg   uint8                  1 (greyscale, ``(H, W)`` or ``(H, W, 1)``) or 3
webp   uint8                  3 or 4
jxl    uint8 or uint16        1, 2, 3 or 4
====== ====================== ===========================================

JPEG could technically hold 2 or 4 components, but no decoder TensorFlow
users have reads them as pixels (4 is CMYK), so they are refused.

The declared bound (:meth:`LossyImage.psnr_floor`): ``dstore verify`` passes
a lossy field when the PSNR of the whole field against its source is at
least ``20 + quality / 10`` dB (29 dB at quality 90). Natural photographs
clear it at every quality with 2.5 dB or more to spare (measured on
scikit-image's sample photos); pure noise does not (JPEG's 4:2:0 chroma
subsampling alone caps it near 13 dB), and verify then reports the numbers
and fails, which is the truth about such data.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CodecIOError, DstoreError, UnsupportedDtypeError
from ..limits import env_limit
from ..model import Image
from ..model.schema import FieldSpec, Schema

__all__ = [
    "IMAGE_FORMATS",
    "LOSSY_FORMATS",
    "MAX_IMAGE_PIXELS",
    "ErrorStats",
    "LossyImage",
    "check_image_pixels",
    "check_quality",
    "image_fields",
    "image_size",
    "is_image_like",
    "jpeg_frame",
    "record_channels",
]

#: Pixels (width x height) an encoded image may declare before it is decoded: a
#: 1.5 MB PNG of one colour declares 1.6 GB. 2**28 (268 million, 16384 x 16384)
#: is 2.7 times the largest camera sensors (100 MP), the most a lossy WebP can
#: hold, and 1 GiB once decoded as RGBA uint8; Pillow's bomb error is at 179
#: million. Raise it by setting this, or the environment variable
#: ``DSTORE_MAX_IMAGE_PIXELS`` (which wins), for larger images.
MAX_IMAGE_PIXELS = 2**28
_PIXELS_ENV = "DSTORE_MAX_IMAGE_PIXELS"
#: JPEG start-of-frame markers (the ones that carry the image size)
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}

LOSSY_FORMATS = ("jpeg", "webp", "jxl")
IMAGE_FORMATS = ("png", *LOSSY_FORMATS)
QUALITY_RANGE = (1, 100)
DEFAULT_QUALITY = 90

#: imagecodecs' codec flag (``imagecodecs.X.available``) and the library behind it
_LIBRARY = {
    "jpeg": ("JPEG8", "libjpeg-turbo"),
    "webp": ("WEBP", "libwebp"),
    "jxl": ("JPEGXL", "libjxl"),
}
#: (dtypes, channels) each format takes; channels 0 = a 2-d record
_TAKES: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "jpeg": (("uint8",), (0, 1, 3)),
    "webp": (("uint8",), (3, 4)),
    "jxl": (("uint8", "uint16"), (0, 1, 2, 3, 4)),
}


def max_image_pixels() -> int:
    """The pixel limit in force: ``DSTORE_MAX_IMAGE_PIXELS`` if set, else :data:`MAX_IMAGE_PIXELS`."""
    return env_limit(_PIXELS_ENV, MAX_IMAGE_PIXELS)


def jpeg_frame(data: bytes) -> tuple[int, int, int, int] | None:
    """(sample precision, height, width, components) from a JPEG's start-of-frame
    segment, walking the segments before it; None when there is none."""
    pos = 2
    while pos + 10 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        if marker in _JPEG_SOF:
            precision, height, width, components = struct.unpack(">BHHB", data[pos + 4 : pos + 10])
            return precision, height, width, components
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        pos += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        return int.from_bytes(data[27:30], "little") + 1, width
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return height & 0x3FFF, width & 0x3FFF
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) an encoded image declares in its header (PNG, JPEG, WebP, GIF,
    BMP), without decoding it; None for other formats or a header too short."""
    head = bytes(data[:32])
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return height, width
    if head[:3] == b"\xff\xd8\xff":
        frame = jpeg_frame(bytes(data[: 1 << 20]))
        return None if frame is None else frame[1:3]
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp_size(head)
    if head[:4] == b"GIF8" and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return height, width
    if head[:2] == b"BM" and len(head) >= 26:
        width, height = struct.unpack("<ii", head[18:26])
        return abs(height), abs(width)
    return None


def check_image_pixels(data: bytes, where: str) -> None:
    """Refuse an encoded image whose header declares more pixels than the limit,
    before a decoder allocates them (one line naming ``where``)."""
    size = image_size(data)
    if size is None:
        return
    limit = max_image_pixels()
    height, width = size
    if height * width > limit:
        raise CodecIOError(
            f"{where}: the image declares {width} x {height} pixels ({width * height:,}), "
            f"more than the limit of {limit:,} (a decompression bomb?); raise it with the "
            f"environment variable {_PIXELS_ENV} or dstore.images.imagecodec.MAX_IMAGE_PIXELS"
        )


def _fits(fmt: str, spec: FieldSpec, channels: int | None) -> bool:
    dtypes, takes = _TAKES[fmt]
    return spec.dtype.newbyteorder("=").name in dtypes and channels in takes


class CodecLibraryMissing(DstoreError, ImportError):
    """imagecodecs is absent, or was built without the codec a field asks for."""


def check_quality(quality: Any, where: str) -> int:
    """``quality`` as an int in 1..100, or a ValueError naming ``where``."""
    lo, hi = QUALITY_RANGE
    text = str(quality).strip()
    # an int, or a string of digits (-o quality=90); never a float silently truncated
    q = int(text) if isinstance(quality, (int, str)) and text.isdigit() else None
    if q is None or not lo <= q <= hi:
        raise ValueError(
            f"{where}: quality must be an integer {lo}..{hi}. Got {quality!r} instead."
        )
    return q


def record_channels(shape: tuple[int, ...]) -> int | None:
    """Channels of an image record shape: 0 for ``(H, W)``, C for ``(H, W, C)``, None otherwise."""
    if len(shape) == 2:
        return 0
    if len(shape) == 3:
        return shape[2]
    return None


def is_image_like(spec: FieldSpec) -> bool:
    """uint8/uint16 arrays shaped like an image (and not a tiny vector or one-hot):
    the fields TFRecord stores as PNG by default and ``image_codec`` applies to."""
    if spec.dtype.kind != "u" or spec.dtype.itemsize not in (1, 2):
        return False
    shape = spec.shape
    if len(shape) == 3 and shape[2] not in (1, 3, 4):
        return False
    return len(shape) in (2, 3) and min(shape[:2]) >= 8


def image_fields(schema: Schema) -> Iterator[tuple[str, FieldSpec]]:
    """(split, field) of every image field a lossy option applies to: raw images of one
    size and uint8/uint16 tensors shaped like images."""
    for split in schema.splits.values():
        for spec in split.fields.values():
            if spec.dense and (isinstance(spec.kind, Image) or is_image_like(spec)):
                yield split.name, spec


def _imagecodecs(fmt: str, where: str) -> Any:
    """imagecodecs, checked to have ``fmt``'s codec; else one line naming what to install."""
    flag, lib = _LIBRARY[fmt]
    try:
        import imagecodecs
    except ImportError:
        raise CodecLibraryMissing(
            f"{where}: {fmt} images need imagecodecs, which is not installed: "
            "pip install 'dstore-ml[tfrecord]' or 'dstore-ml[zarr]' (both bring it)"
        ) from None
    codec = getattr(imagecodecs, flag, None)
    if codec is None or not codec.available:
        raise CodecLibraryMissing(
            f"{where}: {fmt} images need imagecodecs built with {lib} "
            f"(imagecodecs.{flag}.available is False in imagecodecs {imagecodecs.__version__}): "
            "pip install -U 'dstore-ml[tfrecord]' installs a wheel that has it"
        )
    return imagecodecs


@dataclass(frozen=True)
class LossyImage:
    """One lossy encoding: a format (jpeg, webp, jxl) and a quality 1..100."""

    format: str
    quality: int = DEFAULT_QUALITY

    def __post_init__(self) -> None:
        if self.format not in LOSSY_FORMATS:
            raise ValueError(
                f"lossy image format must be one of {', '.join(LOSSY_FORMATS)}. "
                f"Got {self.format!r} instead."
            )
        object.__setattr__(self, "quality", check_quality(self.quality, self.format))

    def check_field(
        self, spec: FieldSpec, where: str, lossless: str = "png", images_option: bool = True
    ) -> None:
        """Refuse, before anything is written, a field this encoding cannot hold exactly
        in shape (wrong dtype or channels), or whose codec library is missing.

        The message names what to set instead: ``-o image_codec=`` the format's
        ``lossless`` choice (``png``; ``none`` for zarr) or another lossy codec, or,
        where the format has an ``images`` option, leaving the field out."""
        dtypes, channels = _TAKES[self.format]
        kind = spec.kind
        # a raw image of varying size has its channels in its kind, a dense record in its shape
        c = (
            kind.channels
            if isinstance(kind, Image) and not spec.dense
            else record_channels(spec.shape)
        )
        if spec.dtype.newbyteorder("=").name not in dtypes or c not in channels:
            shapes = " or ".join("(H, W)" if n == 0 else f"(H, W, {n})" for n in channels)
            shown = spec.kind.describe() if not spec.dense else f"{spec.dtype.name} {spec.shape}"
            instead = [f for f in ("jpeg", "webp", "jxl") if f != self.format and _fits(f, spec, c)]
            hint = f"use -o image_codec={lossless} (lossless)" + "".join(
                f" or image_codec={f}" for f in instead
            )
            if images_option:
                hint += ", or leave the field out with -o images=..."
            raise UnsupportedDtypeError(
                f"{where}: field {spec.name!r} is {shown}: {self.format} takes "
                f"{' or '.join(dtypes)} {shapes}; {hint}"
            )
        _imagecodecs(self.format, f"{where}: field {spec.name!r}")

    def library_id(self) -> str:
        """The library and version behind the bytes, with the quality: all they depend on
        besides the pixels (goes in the TFRecord manifest's ``libraries``)."""
        ic = _imagecodecs(self.format, self.format)
        version = {
            "jpeg": ic.jpeg8_version,
            "webp": ic.webp_version,
            "jxl": ic.jpegxl_version,
        }[self.format]()
        return f"{version} quality {self.quality}"

    def encode(self, img: np.ndarray) -> bytes:
        """Encoded bytes of one record ``(H, W)`` or ``(H, W, C)`` (``C == 1`` as greyscale)."""
        ic = _imagecodecs(self.format, self.format)
        if img.ndim == 3 and img.shape[2] == 1:
            img = img[..., 0]
        img = np.ascontiguousarray(img, dtype=img.dtype.newbyteorder("="))
        if self.format == "jpeg":
            return bytes(ic.jpeg8_encode(img, level=self.quality))
        if self.format == "webp":
            # imagecodecs' webp_encode is lossless unless told otherwise
            return bytes(ic.webp_encode(img, level=self.quality, lossless=False))
        return bytes(ic.jpegxl_encode(img, level=self.quality, lossless=False))

    def decode(self, data: bytes) -> np.ndarray:
        """Pixels of one encoded record (greyscale as ``(H, W)``)."""
        ic = _imagecodecs(self.format, self.format)
        if self.format == "jpeg":
            return ic.jpeg8_decode(data)
        if self.format == "webp":
            return ic.webp_decode(data)
        return ic.jpegxl_decode(data)

    def decode_record(
        self, data: bytes, shape: tuple[int, ...], dtype: np.dtype, where: str
    ) -> np.ndarray:
        """Pixels of one record, checked against the field (``shape`` may hold -1 for a
        size that varies) and given the field's record shape."""
        check_image_pixels(data, where)
        try:
            img = self.decode(data)
        except DstoreError:
            raise
        except Exception as e:  # noqa: BLE001 - imagecodecs raises its own error types
            raise CodecIOError(f"{where}: {self.format} does not decode: {e}") from None
        if img.ndim == 2 and len(shape) == 3 and shape[2] == 1:
            img = img[..., None]
        ok = img.dtype == dtype.newbyteorder("=") and img.ndim == len(shape)
        ok = ok and all(want in (-1, got) for want, got in zip(shape, img.shape, strict=False))
        if not ok:
            raise CodecIOError(
                f"{where}: {self.format} image is {img.dtype} {img.shape}, "
                f"field expects {dtype.name} {tuple(shape)}"
            )
        return img

    def psnr_floor(self) -> float:
        """The PSNR (dB) this encoding declares: ``dstore verify`` passes a field at or above it."""
        return 20.0 + self.quality / 10.0

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "quality": self.quality}

    def describe(self) -> str:
        return f"{self.format} quality {self.quality}"


def lossy_from_json(data: Mapping[str, Any] | None) -> LossyImage | None:
    if not data:
        return None
    return LossyImage(str(data["format"]), int(data["quality"]))


class ErrorStats:
    """Max and mean absolute error and PSNR of decoded images against their source,
    accumulated batch by batch (the peak is the dtype's largest value)."""

    def __init__(self, dtype: np.dtype) -> None:
        self.peak = float(np.iinfo(dtype).max) if dtype.kind in "ui" else 1.0
        self.count = 0
        self.max_abs = 0.0
        self.sum_abs = 0.0
        self.sum_sq = 0.0

    def update(self, a: np.ndarray, b: np.ndarray) -> None:
        d = a.astype(np.float64) - b.astype(np.float64)
        if d.size:
            self.max_abs = max(self.max_abs, float(np.abs(d).max()))
        self.sum_abs += float(np.abs(d).sum())
        self.sum_sq += float(np.square(d).sum())
        self.count += d.size

    @property
    def mean_abs(self) -> float:
        return self.sum_abs / self.count if self.count else 0.0

    @property
    def psnr(self) -> float:
        """Peak signal-to-noise ratio in dB; inf when the values are equal."""
        mse = self.sum_sq / self.count if self.count else 0.0
        return math.inf if mse == 0 else 10.0 * math.log10(self.peak**2 / mse)

    def text(self) -> str:
        psnr = "inf" if math.isinf(self.psnr) else f"{self.psnr:.1f}"
        return f"max abs error {self.max_abs:g}, mean abs error {self.mean_abs:.3f}, PSNR {psnr} dB"
