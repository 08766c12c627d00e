"""Pixels in an Example: one PNG per record (``png``) or one lossy image (``jpeg``,
``webp``, ``jxl``), decoded back by dstore or by TensorFlow's own ops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ....errors import CodecIOError, DstoreError
from ....images.imagecodec import LOSSY_FORMATS, LossyImage
from ....images.pixels import record_shape
from ....images.png import decode as png_decode
from ....model import Image
from ....model.schema import FieldSpec
from ..wire import BYTES, encode_feature
from .base import ExampleEncoding, FieldEncoding, _native

__all__ = ["Lossy", "Png"]


class Png(ExampleEncoding):
    """Pixels as one PNG (a 1-channel axis dropped), decoded back to the field's pixels."""

    name = "png"
    one_string = True
    keeps_views = True  # decoded from a view into the record: not copied to bytes first

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        img = value if value.ndim == 2 or value.shape[2] != 1 else value[..., 0]
        native = np.ascontiguousarray(img.astype(img.dtype.newbyteorder("="), copy=False))
        return encode_feature(BYTES, png(native))

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        where = f"{where}, feature {enc.feature!r}"
        return self._checked(_png(values[0], where), spec, where)

    def decode_into(
        self,
        enc: FieldEncoding,
        spec: FieldSpec,
        kind: int,
        values: Any,
        where: str,
        into: np.ndarray,
    ) -> None:
        """The PNG decoded straight into the record's row when it holds the field's pixels
        (no array per record, no copy); anything else is checked as :meth:`read` checks."""
        values = self.feature_values(enc, kind, values, where)
        where = f"{where}, feature {enc.feature!r}"
        img = _png(values[0], where, into)
        if img is not into:
            into[...] = self._checked(img, spec, where)

    @staticmethod
    def _checked(img: np.ndarray, spec: FieldSpec, where: str) -> np.ndarray:
        """A decoded PNG as a record of ``spec``, or one error line naming ``where``."""
        if spec.dense:
            if img.dtype != _native(spec) or img.size != math.prod(spec.shape):
                raise CodecIOError(
                    f"{where}: PNG is {img.dtype} {img.shape}, field expects {spec.dtype} "
                    f"{spec.shape} (images of varying size in one field are not supported)"
                )
            return img.reshape(spec.shape)
        kind = spec.kind  # a raw Image of varying size
        assert isinstance(kind, Image)
        if kind.channels == 1 and img.ndim == 2:  # PNG has no 1-channel axis: dropped on write
            img = img[..., None]
        channels = 0 if img.ndim == 2 else img.shape[2]
        if img.dtype != kind.dtype or (kind.channels is not None and channels != kind.channels):
            raise CodecIOError(
                f"{where}: PNG is {img.dtype} {img.shape}, field expects {kind.describe()}"
            )
        for axis, want in ((0, kind.height), (1, kind.width)):
            if want is not None and img.shape[axis] != want:
                raise CodecIOError(f"{where}: PNG is {img.shape}, field expects {kind.describe()}")
        return img

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec).name
        channels = shape[2] if len(shape) == 3 else 1
        value = f"tf.io.decode_png({value}, channels={channels}, dtype=tf.{native})"
        if len(shape) == 2:  # TensorFlow keeps the channel axis dstore drops
            return value, native, (*shape, 1), f"; dstore reads {shape}"
        return value, native, shape, ""


def _png(data: bytes, where: str, out: np.ndarray | None = None) -> np.ndarray:
    try:
        return png_decode(data, where, out)
    except DstoreError:
        raise  # a pixel bomb, refused from its header
    except Exception as e:  # noqa: BLE001 - imagecodecs raises its own error types
        raise CodecIOError(f"{where}: PNG does not decode: {e}") from None


class Lossy(ExampleEncoding):
    """Pixels as one JPEG, WebP or JPEG XL of the field's quality, decoded back to pixels."""

    names = LOSSY_FORMATS

    one_string = True

    def __init__(self, name: str) -> None:
        self.name = name  # one instance per lossy format

    def lossy_image(self, quality: int | None) -> LossyImage | None:
        return LossyImage(self.name, quality if quality is not None else 0)

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        lossy = enc.lossy
        assert lossy is not None
        return encode_feature(BYTES, lossy.encode(value))

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        lossy = enc.lossy
        assert lossy is not None
        return lossy.decode_record(
            values[0], record_shape(spec), spec.dtype, f"{where}, feature {enc.feature!r}"
        )

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec).name
        channels = shape[2] if len(shape) == 3 else 1
        value = _lossy_decode_expr(value, self.name, channels, native)
        if self.name == "jxl":  # TensorFlow has no JPEG XL decoder: give it the shape
            value = f"tf.ensure_shape({value}, {[*shape[:2], channels]})"
        note = ""
        if len(shape) == 2:  # TensorFlow keeps the channel axis dstore drops
            note, shape = f"; dstore reads {shape}", (*shape, 1)
        return value, native, shape, f"{note}; {self.name} quality {enc.quality}"

    def tf_var_value(self, value: str, spec: FieldSpec, enc: FieldEncoding) -> str:
        kind = spec.kind  # raw pixels of varying size, stored lossy
        assert isinstance(kind, Image)
        return _lossy_decode_expr(value, self.name, kind.channels or 0, kind.dtype.name)


def _lossy_decode_expr(value: str, fmt: str, channels: int, dtype: str) -> str:
    """TensorFlow decoding a dstore-encoded lossy image to its pixels."""
    if fmt == "jpeg":
        # TensorFlow's default IDCT is libjpeg-turbo's fast integer one; the accurate one is
        # what imagecodecs (dstore's reads) uses: then both give the same pixels
        return f"tf.io.decode_jpeg({value}, channels={channels}, dct_method='INTEGER_ACCURATE')"
    if fmt == "webp":
        return f"tf.io.decode_image({value}, channels={channels}, expand_animations=False)"
    # JPEG XL: TensorFlow has no decoder; imagecodecs (which wrote it) decodes in the pipeline
    decode = "lambda b: __import__('imagecodecs').jpegxl_decode(b)"
    if channels in (0, 1):
        decode = "lambda b: __import__('imagecodecs').jpegxl_decode(b)[..., None]"
    return f"tf.numpy_function({decode}, [{value}], tf.{dtype})"
