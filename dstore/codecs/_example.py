"""``tf.train.Example`` protobuf wire encoding and decoding, by hand.

The message is small and fixed (tensorflow/core/example/example.proto)::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }   // entries: key = 1, value = 2
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                       Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

Writing it by hand keeps TensorFlow and the protobuf runtime out of the write
path and lets numpy produce packed floats and varints for whole arrays.
Decoding accepts packed and unpacked repeated fields, as protobuf parsers must.
"""

from __future__ import annotations

import numpy as np

from ..errors import CodecIOError

__all__ = ["BYTES", "FLOAT", "INT64", "decode_example", "encode_example", "encode_feature", "encode_varints"]

BYTES, FLOAT, INT64 = 1, 2, 3
KIND_NAMES = {BYTES: "bytes_list", FLOAT: "float_list", INT64: "int64_list"}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len_field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(payload)) + payload


def encode_varints(values: np.ndarray) -> bytes:
    """Packed base-128 varints of int64 values (negatives as 10-byte two's complement)."""
    v = np.ascontiguousarray(values, dtype=np.int64).reshape(-1).view(np.uint64)
    if v.size == 0:
        return b""
    if int(v.max()) < 0x80:  # the common case: small labels, one byte each
        return v.astype(np.uint8).tobytes()
    nbytes = np.ones(v.shape, np.int64)
    rest = v >> np.uint64(7)
    while rest.any():
        nbytes += rest > 0
        rest >>= np.uint64(7)
    out = np.empty(int(nbytes.sum()), np.uint8)
    starts = np.cumsum(nbytes) - nbytes
    for k in range(int(nbytes.max())):
        m = nbytes > k
        byte = ((v[m] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        more = (nbytes[m] > k + 1).astype(np.uint8) << 7
        out[starts[m] + k] = byte | more
    return out.tobytes()


def _decode_varints(data: bytes | memoryview) -> np.ndarray:
    b = np.frombuffer(data, np.uint8)
    if b.size == 0:
        return np.empty(0, np.int64)
    if b[-1] & 0x80:
        raise ValueError("packed varints end mid-value")
    ends = np.flatnonzero(b < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > 10:
        raise ValueError("varint longer than 10 bytes")
    vals = np.zeros(len(ends), np.uint64)
    for k in range(int(lengths.max())):
        m = lengths > k
        vals[m] |= (b[starts[m] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return vals.view(np.int64)


def encode_feature(kind: int, value: bytes | np.ndarray | list[bytes]) -> bytes:
    """A serialized ``Feature`` holding one list."""
    if kind == BYTES:
        items = [value] if isinstance(value, (bytes, bytearray, memoryview)) else value
        inner = b"".join(_len_field(0x0A, bytes(item)) for item in items)
    elif kind == FLOAT:
        packed = np.ascontiguousarray(value, dtype="<f4").tobytes()
        inner = _len_field(0x0A, packed) if packed else b""
    elif kind == INT64:
        packed = encode_varints(np.asarray(value))
        inner = _len_field(0x0A, packed) if packed else b""
    else:
        raise ValueError(f"unknown feature kind {kind}")
    return _len_field(0x08 * kind + 2, inner)


def encode_example(features: dict[str, bytes]) -> bytes:
    """Serialize ``{name: encoded Feature}`` into an ``Example``."""
    entries = b"".join(
        _len_field(0x0A, _len_field(0x0A, name.encode()) + _len_field(0x12, feat))
        for name, feat in features.items()
    )
    return _len_field(0x0A, entries)


# ---------------------------------------------------------------------- decoding


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: memoryview) -> list[tuple[int, int, memoryview | int]]:
    """(field number, wire type, payload) for each field of a message."""
    out = []
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 2:
            n, pos = _read_varint(buf, pos)
            if pos + n > end:
                raise ValueError("length-delimited field runs past the message")
            out.append((num, wire, buf[pos : pos + n]))
            pos += n
        elif wire == 0:
            v, pos = _read_varint(buf, pos)
            out.append((num, wire, v))
        elif wire == 5:
            if pos + 4 > end:
                raise ValueError("truncated fixed32")
            out.append((num, wire, buf[pos : pos + 4]))
            pos += 4
        elif wire == 1:
            if pos + 8 > end:
                raise ValueError("truncated fixed64")
            out.append((num, wire, buf[pos : pos + 8]))
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _decode_list(kind: int, buf: memoryview) -> list[bytes] | np.ndarray:
    if kind == BYTES:
        return [bytes(p) for num, wire, p in _fields(buf) if num == 1 and wire == 2]  # type: ignore[arg-type]
    parts: list[np.ndarray] = []
    for num, wire, p in _fields(buf):
        if num != 1:
            continue
        if kind == FLOAT:
            if wire not in (2, 5):
                raise ValueError("float_list value with wrong wire type")
            if len(p) % 4:  # type: ignore[arg-type]
                raise ValueError("packed floats not a multiple of 4 bytes")
            parts.append(np.frombuffer(p, "<f4"))  # type: ignore[arg-type]
        elif wire == 2:
            parts.append(_decode_varints(p))  # type: ignore[arg-type]
        elif wire == 0:
            parts.append(np.array([p], np.uint64).view(np.int64))
        else:
            raise ValueError("int64_list value with wrong wire type")
    dtype = np.float32 if kind == FLOAT else np.int64
    if not parts:
        return np.empty(0, dtype)
    return np.concatenate(parts).astype(dtype, copy=False) if len(parts) > 1 else parts[0].astype(dtype, copy=False)


def decode_example(data: bytes, where: str = "") -> dict[str, tuple[int, list[bytes] | np.ndarray]]:
    """Parse a serialized Example into ``{name: (kind, values)}``."""
    try:
        out: dict[str, tuple[int, list[bytes] | np.ndarray]] = {}
        for num, wire, features in _fields(memoryview(data)):
            if num != 1 or wire != 2:
                continue
            for fnum, fwire, entry in _fields(features):  # type: ignore[arg-type]
                if fnum != 1 or fwire != 2:
                    continue
                name = None
                feature = None
                for enum_, ewire, payload in _fields(entry):  # type: ignore[arg-type]
                    if enum_ == 1 and ewire == 2:
                        name = bytes(payload).decode()  # type: ignore[arg-type]
                    elif enum_ == 2 and ewire == 2:
                        feature = payload
                if name is None:
                    raise ValueError("feature map entry without a key")
                kind, values = 0, None
                for knum, kwire, lst in _fields(feature or memoryview(b"")):  # type: ignore[arg-type]
                    if knum in (BYTES, FLOAT, INT64) and kwire == 2:
                        kind, values = knum, _decode_list(knum, lst)  # type: ignore[arg-type]
                if kind == 0:
                    raise ValueError(f"feature {name!r} holds no list")
                out[name] = (kind, values)  # type: ignore[assignment]
        return out
    except (ValueError, UnicodeDecodeError, IndexError) as e:
        raise CodecIOError(f"{where}: not a valid tf.train.Example: {e}") from None
