"""``tensorflow.TensorProto`` decoding, by hand: what ``tf.io.serialize_tensor`` writes.

label-maker's own TFRecord writer stores each image as
``tf.io.serialize_tensor(img)`` bytes in a ``bytes_list``; reading them back
without TensorFlow means parsing the message (tensorflow/core/framework/
tensor.proto)::

    TensorProto { DataType dtype = 1; TensorShapeProto tensor_shape = 2;
                  bytes tensor_content = 4;           // little-endian, row-major
                  repeated <typed> *_val = 5..13, 16, 17 [packed]; }
    TensorShapeProto { repeated Dim dim = 2; bool unknown_rank = 3; }
    Dim { int64 size = 1; string name = 2; }

Numeric tensors come as ``tensor_content``; the typed repeated fields are the
other encoding TensorFlow accepts, where fewer values than the shape holds
mean "repeat the last one" (``tf.make_tensor_proto`` of a constant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CodecIOError
from ..arraytree.chunked import max_fill_bytes
from .wire import _decode_varints, _fields, _len_field, _varint

__all__ = ["StringTensor", "looks_like_tensor_proto", "parse_tensor_proto", "serialize_tensor"]

#: tensorflow/core/framework/types.proto DataType -> numpy dtype (little-endian)
_DTYPES: dict[int, str] = {
    1: "<f4", 2: "<f8", 3: "<i4", 4: "|u1", 5: "<i2", 6: "|i1", 8: "<c8", 9: "<i8",
    10: "|b1", 17: "<u2", 18: "<c16", 19: "<f2", 22: "<u4", 23: "<u8",
}  # fmt: skip
_DT_STRING = 7
_NAMES = {14: "bfloat16", 20: "resource", 21: "variant", 11: "qint8", 12: "quint8", 13: "qint32",
          15: "qint16", 16: "quint16"}  # fmt: skip
#: typed value field -> (numpy dtype of its wire values, how they are packed)
_VAL_FIELDS: dict[int, tuple[str, str]] = {
    5: ("<f4", "fixed"), 6: ("<f8", "fixed"), 7: ("<i8", "varint"), 9: ("<f4", "fixed"),
    10: ("<i8", "varint"), 11: ("<i8", "varint"), 12: ("<f8", "fixed"), 13: ("<i8", "varint"),
    16: ("<i8", "varint"), 17: ("<i8", "varint"),
}  # fmt: skip


@dataclass(frozen=True)
class StringTensor:
    """A ``tf.string`` tensor: its shape and the byte strings in row-major order."""

    shape: tuple[int, ...]
    values: list[bytes]


def looks_like_tensor_proto(data: bytes) -> bool:
    """Cheap test: starts with a DataType varint field and parses as a TensorProto."""
    if len(data) < 2 or data[0] != 0x08:
        return False
    try:
        parse_tensor_proto(data, "")
    except CodecIOError:
        return False
    return True


def _shape(buf: memoryview) -> tuple[int, ...]:
    dims = []
    for num, wire, dim in _fields(buf):
        if num == 3 and wire == 0 and dim:
            raise ValueError("tensor of unknown rank")
        if num != 2 or wire != 2:
            continue
        size = 0
        for dnum, dwire, v in _fields(dim):
            if dnum == 1 and dwire == 0:
                size = int(v)
        if size >= 1 << 63:
            raise ValueError("unknown (-1) dimension")
        dims.append(size)
    return tuple(dims)


def parse_tensor_proto(data: bytes, where: str) -> np.ndarray | StringTensor:
    """The tensor a serialized TensorProto holds (numbers as an ndarray)."""
    try:
        proto = _TensorFields()
        for num, wire, payload in _fields(memoryview(data)):
            proto.add(num, wire, payload)
        return proto.tensor()
    except (ValueError, TypeError, IndexError) as e:
        raise CodecIOError(
            f"{where}: not a serialized tensor (tf.io.serialize_tensor): {e}"
        ) from None


class _TensorFields:
    """The fields of one TensorProto as they are read, then the tensor they make."""

    def __init__(self) -> None:
        self.dtype_enum = 0
        self.shape: tuple[int, ...] = ()
        self.content: bytes | None = None
        self.strings: list[bytes] = []
        self.typed: dict[int, list[np.ndarray]] = {}

    def add(self, num: int, wire: int, payload: Any) -> None:
        if num == 1 and wire == 0:
            self.dtype_enum = int(payload)
        elif num == 2 and wire == 2:
            self.shape = _shape(payload)
        elif num == 4 and wire == 2:
            self.content = bytes(payload)
        elif num == 8 and wire == 2:
            self.strings.append(bytes(payload))
        elif num in _VAL_FIELDS:
            values = _typed_values(num, wire, payload)
            if values is not None:
                self.typed.setdefault(num, []).append(values)

    def tensor(self) -> np.ndarray | StringTensor:
        shape, strings = self.shape, self.strings
        count = math.prod(shape)
        self._check_fill(count)
        if self.dtype_enum == _DT_STRING:
            if len(strings) not in (count, 1) and not (count == 0 and not strings):
                raise ValueError(f"{len(strings)} strings for shape {shape}")
            return StringTensor(
                shape, strings * count if len(strings) == 1 and count != 1 else strings
            )
        if self.dtype_enum not in _DTYPES:
            name = _NAMES.get(self.dtype_enum, f"DataType {self.dtype_enum}")
            raise ValueError(f"tensors of {name} are not supported")
        dtype = np.dtype(_DTYPES[self.dtype_enum])
        if self.content is not None:
            if len(self.content) != count * dtype.itemsize:
                raise ValueError(
                    f"tensor_content has {len(self.content)} bytes, shape {shape} of "
                    f"{dtype.name} needs {count * dtype.itemsize}"
                )
            return np.frombuffer(self.content, dtype).reshape(shape)
        return _from_typed(self.typed, dtype, shape, count)

    def _check_fill(self, count: int) -> None:
        """TensorFlow repeats a tensor's last value to fill its shape: a few bytes may
        declare (10**12,). What is filled beyond the bytes stored is the fill limit's
        (:data:`~dstore.codecs.arraytree.chunked.MAX_FILL_BYTES`, 1 GiB), checked before
        anything is allocated."""
        known = _DTYPES.get(self.dtype_enum)
        width = 8 if self.dtype_enum == _DT_STRING else np.dtype(known or "u1").itemsize
        stored = len(self.content or b"") + sum(len(s) for s in self.strings)
        stored += sum(v.nbytes for parts in self.typed.values() for v in parts)
        limit = max_fill_bytes()
        if count * width > stored + limit:
            raise ValueError(
                f"shape {self.shape} fills {count * width:,} bytes from {stored:,} stored, more "
                f"than the fill limit of {limit:,} (DSTORE_MAX_FILL_BYTES raises it)"
            )


def _typed_values(num: int, wire: int, payload: Any) -> np.ndarray | None:
    """The values of one typed value field (``float_val``, ``int_val``...), packed or
    not; None for a wire type the field cannot have (skipped, as protobuf does)."""
    wire_dtype, packing = _VAL_FIELDS[num]
    if wire == 2 and packing == "varint":
        return _decode_varints(payload)
    if wire == 2:
        if len(payload) % np.dtype(wire_dtype).itemsize:
            raise ValueError(f"packed field {num} is not whole values")
        return np.frombuffer(payload, wire_dtype)
    if wire == 0:
        return np.array([payload], np.uint64).view(np.int64)
    if wire in (1, 5):
        return np.frombuffer(payload, wire_dtype)
    return None


def serialize_tensor(arr: np.ndarray) -> bytes:
    """What ``tf.io.serialize_tensor`` writes for a numeric array: dtype, shape, then the
    values as little-endian ``tensor_content`` (label-maker's classification records)."""
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype
    enum = next((k for k, v in _DTYPES.items() if np.dtype(v) == dtype), None)
    if enum is None:
        raise ValueError(f"no TensorFlow DataType for {arr.dtype}")
    # proto3 leaves out fields at their default: a size-0 dimension is an empty Dim
    dims = b"".join(_len_field(0x12, b"\x08" + _varint(n) if n else b"") for n in arr.shape)
    content = np.ascontiguousarray(arr, dtype=dtype).tobytes()
    # an empty tensor has no tensor_content field at all, as TensorFlow writes it
    return (
        b"\x08"
        + _varint(enum)
        + _len_field(0x12, dims)
        + (_len_field(0x22, content) if content else b"")
    )


def _from_typed(
    typed: dict[int, list[np.ndarray]], dtype: np.dtype, shape: tuple[int, ...], count: int
) -> np.ndarray:
    values = np.concatenate([v for parts in typed.values() for v in parts]) if typed else None
    if values is None or len(values) == 0:
        return np.zeros(shape, dtype)
    field = next(iter(typed))
    if dtype.kind == "c":  # complex values come as (real, imag) pairs
        if len(values) % 2:
            raise ValueError("complex values are not pairs")
        values = values.astype(np.float64).view(np.complex128)
    if field == 13:  # half_val holds float16 bit patterns in int32s
        out = values.astype(np.uint16).view(np.float16)
    elif dtype.kind == "b":
        out = values != 0
    else:
        out = values.astype(dtype)
    if len(out) > count:
        raise ValueError(f"{len(out)} values for shape {shape}")
    if len(out) < count:  # TensorFlow's rule: the last value repeats
        out = np.concatenate([out, np.full(count - len(out), out[-1], out.dtype)])
    return out.astype(dtype).reshape(shape)
