"""Numbers in an Example: ``int64`` and ``float`` lists, any other dtype's little-endian
bytes (``raw``), and ``tf.io.serialize_tensor`` records (``tensor``, read only)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ....errors import CodecIOError
from ....model import Ragged
from ....model.precision import dequant_params
from ....model.schema import FieldSpec
from ..tensorproto import parse_tensor_proto
from ..wire import BYTES, FLOAT, INT64, encode_feature
from .base import (
    DECODE_RAW_DTYPES,
    ExampleEncoding,
    FieldEncoding,
    _cast_expr,
    _native,
    _uint64_bits,
)

__all__ = ["Float", "Int64", "Raw", "Tensor"]


class _Numbers(ExampleEncoding):
    """A list of numbers per record: the field's values, flattened."""

    dtype_copied: ClassVar[str]  # the dtype whose records are the wire's values as they are
    tf_type: ClassVar[str]

    def copyable(self, spec: FieldSpec) -> bool:
        return spec.dtype.str == self.dtype_copied

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        if isinstance(spec.kind, Ragged):
            flat = values.view("<u8") if _uint64_bits(spec) else values
            return _ragged_rows(enc, spec, flat.astype(spec.dtype), where)
        size = math.prod(spec.shape)  # a tuple of ints: math.prod, not numpy per record
        if len(values) != size:
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} has {len(values)} values, expected {size} "
                f"for shape {spec.shape}"
            )
        if _uint64_bits(spec):
            return values.view("<u8").astype(spec.dtype).reshape(spec.shape)
        return values.astype(spec.dtype).reshape(spec.shape)

    def missing(self, spec: FieldSpec) -> Any:
        return np.empty((0, *spec.shape), spec.dtype) if isinstance(spec.kind, Ragged) else None

    def tf_spec(self, feature: str, shape: tuple[int, ...]) -> str:
        dims = [] if shape == () else [int(np.prod(shape))]
        return f"    {feature}: tf.io.FixedLenFeature({dims}, {self.tf_type}),"

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        if len(shape) > 1:
            value = f"tf.reshape({value}, {list(shape)})"
        quant = dequant_params(spec)
        if quant is None:
            return _cast_expr(value, _native(spec)), _native(spec).name, shape, ""
        # int8/uint8 codes: the values dstore reads
        scale, offset = (repr(a.tolist()) for a in quant)
        if quant[0].ndim:
            scale, offset = (f"tf.constant({c}, tf.float32)" for c in (scale, offset))
        value = f"tf.cast({value}, tf.float32) * {scale} + {offset}"
        return value, "float32", shape, f"; {spec.dtype.name} codes dequantized"

    def tf_var_spec(self, feature: str) -> str:
        return f"    {feature}: tf.io.RaggedFeature({self.tf_type}),"


class Int64(_Numbers):
    name = "int64"
    wire = INT64
    dtype_copied = "<i8"
    tf_type = "tf.int64"

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        if _uint64_bits(spec):
            value = value.astype("<u8").view("<i8")
        return encode_feature(INT64, value.reshape(-1))


class Float(_Numbers):
    name = "float"
    wire = FLOAT
    dtype_copied = "<f4"
    tf_type = "tf.float32"

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        return encode_feature(FLOAT, value.reshape(-1))


class Raw(ExampleEncoding):
    """Any other dtype: the record's bytes in the field's byte order, one byte string."""

    name = "raw"
    one_string = True

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        # astype: indexing a 1-d array gives a native-endian scalar, lose no byte order
        return encode_feature(BYTES, np.asarray(value).astype(spec.dtype).tobytes())

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        data = values[0]
        if isinstance(spec.kind, Ragged):
            if len(data) % (spec.dtype.itemsize * max(math.prod(spec.shape), 1)):
                raise CodecIOError(
                    f"{where}: feature {enc.feature!r} has {len(data)} bytes, not a whole number "
                    f"of {spec.dtype} rows of shape {spec.shape}"
                )
            return _ragged_rows(enc, spec, np.frombuffer(data, spec.dtype), where)
        size = math.prod(spec.shape) * spec.dtype.itemsize
        if len(data) != size:
            raise CodecIOError(
                f"{where}: feature {enc.feature!r} has {len(data)} bytes, expected {size}"
            )
        return np.frombuffer(data, spec.dtype).reshape(spec.shape)

    def parsed_whole(self, spec: FieldSpec) -> bool:
        return isinstance(spec.kind, Ragged)

    def tf_lines(self, name: str, enc: FieldEncoding, spec: FieldSpec) -> tuple[str, str]:
        native = _native(spec)
        if native.name in DECODE_RAW_DTYPES or not (spec.dense or self.parsed_whole(spec)):
            return super().tf_lines(name, enc, spec)
        shape = (-1, *spec.shape) if isinstance(spec.kind, Ragged) else spec.shape
        line = (
            f"        {name!r}: ex[{enc.feature!r}],  # raw bytes of {int(np.prod(shape))} {spec.dtype.str} values "
            f"{shape}: TensorFlow has no {native.name}; numpy: np.frombuffer(b, {spec.dtype.str!r})"
        )
        return self.tf_spec(repr(enc.feature), shape), line

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec)
        order = ", little_endian=False" if spec.dtype.byteorder == ">" else ""
        value = f"tf.reshape(tf.io.decode_raw({value}, tf.{native.name}{order}), {list(shape)})"
        return value, native.name, shape, ""


def _ragged_rows(enc: FieldEncoding, spec: FieldSpec, flat: np.ndarray, where: str) -> np.ndarray:
    """A Ragged record ``(n, *inner)`` from its flat values."""
    per = math.prod(spec.shape)
    if per == 0 or len(flat) % per:
        raise CodecIOError(
            f"{where}: feature {enc.feature!r} has {len(flat)} values, not a whole number of "
            f"rows of inner shape {spec.shape} (field {spec.name!r})"
        )
    return flat.reshape(-1, *spec.shape)


class Tensor(ExampleEncoding):
    """Foreign only: ``tf.io.serialize_tensor`` bytes (label-maker); dstore writes no tensors."""

    name = "tensor"

    def encode(self, enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
        raise CodecIOError(f"field {spec.name!r}: dstore reads serialized tensors, never writes")

    def read(self, enc: FieldEncoding, spec: FieldSpec, values: Any, where: str) -> Any:
        where = f"{where}, feature {enc.feature!r}"
        t = parse_tensor_proto(values[0], where)
        if not isinstance(t, np.ndarray) or t.dtype != spec.dtype:
            got = "a string tensor" if not isinstance(t, np.ndarray) else f"a {t.dtype} tensor"
            raise CodecIOError(f"{where}: holds {got}, field expects {spec.kind.describe()}")
        ragged = isinstance(spec.kind, Ragged)
        if (t.shape[1:] if ragged else t.shape) != spec.shape:
            raise CodecIOError(
                f"{where}: tensor of shape {t.shape}, field expects {spec.kind.describe()}"
            )
        return t

    def tf_value(
        self, value: str, spec: FieldSpec, enc: FieldEncoding, shape: tuple[int, ...]
    ) -> tuple[str, str, tuple[int, ...], str]:
        native = _native(spec).name
        return f"tf.io.parse_tensor({value}, out_type=tf.{native})", native, shape, ""

    def tf_var_value(self, value: str, spec: FieldSpec, enc: FieldEncoding) -> str:
        return f"tf.io.parse_tensor({value}, out_type=tf.{_native(spec).name})"


# ------------------------------------------------------------------ byte strings
