"""Image fields' records as encoded bytes and back, for every format that stores pixels
as PNG or a lossy image (TFRecord, WebDataset, Parquet, ...).

* :func:`record_shape`: the shape a decoded record must have (-1 where a raw
  Image's size varies);
* :func:`decode_pixels`: one record from its PNG or lossy bytes, checked against
  the field in one line naming ``where``;
* :func:`lossy_of`: the lossy encoding of a field stored as a named encoding;
* :func:`image_format`: what encoded image bytes are, from their first bytes;
* :func:`image_libraries`: the encoders (with versions) the stored bytes depend
  on, for a manifest's ``libraries``;
* :func:`encode_pixels` / :func:`decode_pixel_column`: a whole column's records
  encoded, or decoded on a thread pool into the field's column;
* :class:`FieldStorage`: a field's entry in a sharded manifest's ``fields`` (its
  encoding, the quality of lossy pixels, the class names of a label).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import CodecIOError
from ..model import Column, Image, VarColumn
from ..model.schema import FieldSpec
from ..parallel import DECODE_GROUP
from .imagecodec import LOSSY_FORMATS, LossyImage
from .png import decode as png_decode
from .png import encoder_id

__all__ = [
    "FieldStorage",
    "decode_pixel_column",
    "decode_pixels",
    "encode_pixels",
    "image_format",
    "image_libraries",
    "lossy_of",
    "record_shape",
]

#: image records a decoding thread takes at a time

_MAGIC = {b"\x89PNG": "png", b"\xff\xd8\xff": "jpeg", b"GIF8": "gif", b"BM": "bmp"}


def lossy_of(encoding: str, quality: int | None) -> LossyImage | None:
    """The lossy image encoding of a field stored as ``encoding``; None when not lossy."""
    return LossyImage(encoding, int(quality or 0)) if encoding in LOSSY_FORMATS else None


def image_format(data: bytes) -> str | None:
    """What encoded image bytes are (png, jpeg, webp, gif, bmp), None when unknown."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return next((fmt for magic, fmt in _MAGIC.items() if data.startswith(magic)), None)


def record_shape(spec: FieldSpec) -> tuple[int, ...]:
    """The shape a decoded image record must have, -1 where a raw Image's size varies."""
    if spec.dense:
        return spec.shape
    kind = spec.kind
    assert isinstance(kind, Image)
    return (-1, -1) if kind.channels == 0 else (-1, -1, kind.channels or -1)


def decode_pixels(
    data: bytes,
    spec: FieldSpec,
    lossy: LossyImage | None,
    where: str,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The pixels of one record of ``spec`` stored as PNG (``lossy`` None) or lossy bytes;
    a PNG that holds exactly ``out`` (the record's row of a dense column) is decoded
    there and ``out`` returned (see :func:`dstore.images.png.decode`)."""
    shape = record_shape(spec)
    if lossy is not None:
        return lossy.decode_record(data, shape, spec.dtype, where)
    try:
        img = png_decode(data, out=out)
        if img is out:
            return img
    except Exception as e:  # noqa: BLE001 - imagecodecs raises its own error types
        raise CodecIOError(f"{where}: PNG does not decode: {e}") from None
    if img.ndim == 2 and len(shape) == 3:  # PNG has no 1-channel axis: dropped on write
        img = img[..., None]
    fits = img.ndim == len(shape) and all(
        w in (-1, g) for w, g in zip(shape, img.shape, strict=False)
    )
    if img.dtype != spec.dtype.newbyteorder("=") or not fits:
        raise CodecIOError(f"{where}: PNG is {img.dtype} {img.shape}, field expects {shape}")
    return img.astype(spec.dtype, copy=False)


def image_libraries(used: Iterable[str | LossyImage | None], png_level: str) -> dict[str, str]:
    """The image encoders of ``used`` (``"png"`` or a lossy encoding; anything else is
    passed over) with their versions: PNG first, then the lossy formats by name."""
    libs = {}
    for how in used:
        if how == "png":
            libs["png"] = encoder_id(png_level)
        elif isinstance(how, LossyImage):
            libs.setdefault(how.format, how.library_id())  # one quality per write
    return dict(sorted(libs.items(), key=lambda kv: (kv[0] != "png", kv[0])))


def encode_pixels(spec: FieldSpec, col: Any, encode: Callable[[np.ndarray], bytes]) -> VarColumn:
    """Each record of an image column (an array of records, or a :class:`VarColumn` of
    images of varying size) as ``encode`` makes it (PNG or a lossy format)."""
    rows = (col[i] if spec.dense else col.row(i) for i in range(len(col)))
    return VarColumn.from_bytes(encode(np.ascontiguousarray(p)) for p in rows)


def decode_pixel_column(
    spec: FieldSpec,
    blobs: Sequence[bytes],
    lossy: LossyImage | None,
    where: str,
    first: int,
    pool: Executor,
) -> Column:
    """Encoded records ``first...`` decoded on ``pool``, :data:`DECODE_GROUP` a task, into
    the field's column (one array when its records share a shape); errors name the record."""

    out = np.empty((len(blobs), *spec.shape), spec.dtype) if spec.dense else None

    def group(lo: int) -> list[np.ndarray]:
        imgs = []
        for i, b in enumerate(blobs[lo : lo + DECODE_GROUP], lo):
            row = None if out is None else out[i, ...]
            img = decode_pixels(b, spec, lossy, f"{where}, record {first + i}", row)
            if row is None:
                imgs.append(img)
            elif img is not row:  # copied on the decoding thread while the image is in cache
                row[...] = img
        return imgs

    imgs = [im for part in pool.map(group, range(0, len(blobs), DECODE_GROUP)) for im in part]
    return out if out is not None else VarColumn.from_shaped(imgs, spec.dtype)


@dataclass(frozen=True)
class FieldStorage:
    """How a field is stored, as a sharded manifest's ``fields`` keeps it: the encoding
    (one of :attr:`ENCODINGS`), ``quality`` of lossy pixels, ``class_names`` of a label."""

    encoding: str
    quality: int | None = None
    class_names: tuple[str, ...] | None = None
    #: the format's encodings (``from_json`` refuses others)
    ENCODINGS: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"encoding": self.encoding}
        if self.quality is not None:
            out["quality"] = self.quality
        if self.class_names is not None:
            out["class_names"] = list(self.class_names)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Any:
        if (enc := data["encoding"]) not in cls.ENCODINGS:
            raise ValueError(f"unknown encoding {enc!r}")
        names = data.get("class_names")
        return cls(enc, data.get("quality"), None if names is None else tuple(map(str, names)))

    @property
    def lossy(self) -> LossyImage | None:
        return lossy_of(self.encoding, self.quality)
