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
A ``SequenceExample`` (``context = 1``, ``feature_lists = 2``) shares the
Example's field 1, so a parser that only looks at field 1 would read its
context and drop its feature lists without a word. Both decoders here read
the feature lists too::

    FeatureLists { map<string, FeatureList> feature_list = 1; }
    FeatureList  { repeated Feature feature = 1; }    // one Feature per step

A feature list is reported under its name with kind ``SEQ + kind`` of its
steps (``SEQ`` alone for a list of no steps, whose kind is unknown); its
values are the steps' lists.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...errors import CodecIOError, DstoreError, SchemaError

__all__ = [
    "BYTES",
    "FLOAT",
    "INT64",
    "SEQ",
    "TF_FEATURE_ATTR",
    "decode_example",
    "encode_example",
    "encode_feature",
    "encode_feature_list",
    "encode_sequence_example",
    "encode_varints",
]

BYTES, FLOAT, INT64 = 1, 2, 3
KIND_NAMES = {BYTES: "bytes_list", FLOAT: "float_list", INT64: "int64_list"}
#: FieldSpec attribute marking a Bytes field whose records are serialized ``Feature``s,
#: which the TFRecord codec writes as they are: how a producer (a layout) writes a list of
#: several strings per record (the Object Detection API's class/text), which no kind holds yet
TF_FEATURE_ATTR = "tf_feature"
#: added to a step's kind for a SequenceExample feature list (alone: a list of no steps)
SEQ = 10
KIND_NAMES = {
    BYTES: "bytes_list",
    FLOAT: "float_list",
    INT64: "int64_list",
    SEQ: "feature list of no steps",
    SEQ + BYTES: "feature list of bytes_list",
    SEQ + FLOAT: "feature list of float_list",
    SEQ + INT64: "feature list of int64_list",
}


#: the one-byte varints, looked up (most lengths, keys and labels are below 128)
_SMALL_VARINTS = [bytes((i,)) for i in range(0x80)]


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_VARINTS[n]
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


#: packed varints up to this many bytes are decoded by a loop over the bytes: the
#: numpy passes below cost tens of microseconds a call whatever the size, which a
#: label or an index of a few bytes paid on every record (measured: 0.47 s of a
#: 4.5 s epoch of 4,000 photo tiles with a 7-value label and an index)
_LOOP_VARINT_BYTES = 64
_U64 = (1 << 64) - 1


def _decode_varints(data: bytes | memoryview) -> np.ndarray:
    if len(data) <= _LOOP_VARINT_BYTES:
        return _decode_few_varints(bytes(data))
    b = np.frombuffer(data, np.uint8)
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


def _decode_few_varints(data: bytes) -> np.ndarray:
    """:func:`_decode_varints` of a few bytes: the same values and the same errors."""
    if data and data[-1] & 0x80:
        raise ValueError("packed varints end mid-value")
    vals, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift >= 70:
                raise ValueError("varint longer than 10 bytes")
        else:
            vals.append(value & _U64)  # bits past 64 dropped, as the uint64 lanes do
            value = shift = 0
    return np.array(vals, np.uint64).view(np.int64)


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


def _map(entries: dict[str, bytes]) -> bytes:
    """The entries of a protobuf ``map<string, message>`` (field 1 of the enclosing message)."""
    return b"".join(
        _len_field(0x0A, _len_field(0x0A, name.encode()) + _len_field(0x12, value))
        for name, value in entries.items()
    )


def encode_example(features: dict[str, bytes]) -> bytes:
    """Serialize ``{name: encoded Feature}`` into an ``Example``."""
    return _len_field(0x0A, _map(features))


def encode_feature_list(steps: list[bytes]) -> bytes:
    """A serialized ``FeatureList`` from its steps' encoded Features."""
    return b"".join(_len_field(0x0A, step) for step in steps)


def encode_sequence_example(context: dict[str, bytes], lists: dict[str, bytes]) -> bytes:
    """Serialize a ``SequenceExample``: context Features and ``{name: encoded FeatureList}``."""
    return _len_field(0x0A, _map(context)) + _len_field(0x12, _map(lists))


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


def _fields(buf: memoryview) -> list[tuple[int, int, Any]]:
    """(field number, wire type, payload) for each field of a message.

    The payload is an ``int`` for wire type 0 and a ``memoryview`` for the
    others; callers test the wire type first, a link the type system cannot
    express on a tuple (hence ``Any`` rather than an ignore at every use)."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        key = buf[pos]  # one-byte keys and lengths are the rule: skip the call for them
        if key < 0x80:
            pos += 1
        else:
            key, pos = _read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 2:
            n = buf[pos] if pos < end else 0x80
            if n < 0x80:
                pos += 1
            else:
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


def _decode_list(
    kind: int, buf: memoryview, views: bool = False
) -> list[bytes] | list[memoryview] | np.ndarray:
    if kind == BYTES:
        items = [p for num, wire, p in _fields(buf) if num == 1 and wire == 2]
        return items if views else [bytes(p) for p in items]
    parts: list[np.ndarray] = []
    for num, wire, p in _fields(buf):
        if num != 1:
            continue
        if kind == FLOAT:
            if wire not in (2, 5):
                raise ValueError("float_list value with wrong wire type")
            if len(p) % 4:
                raise ValueError("packed floats not a multiple of 4 bytes")
            parts.append(np.frombuffer(p, "<f4"))
        elif wire == 2:
            parts.append(_decode_varints(p))
        elif wire == 0:
            parts.append(np.array([p], np.uint64).view(np.int64))
        else:
            raise ValueError("int64_list value with wrong wire type")
    dtype = np.float32 if kind == FLOAT else np.int64
    if not parts:
        return np.empty(0, dtype)
    return (
        np.concatenate(parts).astype(dtype, copy=False)
        if len(parts) > 1
        else parts[0].astype(dtype, copy=False)
    )


def _map_entries(buf: memoryview) -> Iterator[tuple[str, memoryview]]:
    """(key, value payload) of each entry of a protobuf ``map<string, message>``."""
    for fnum, fwire, entry in _fields(buf):
        if fnum != 1 or fwire != 2:
            continue
        name = None
        value = memoryview(b"")
        for enum_, ewire, payload in _fields(entry):
            if enum_ == 1 and ewire == 2:
                name = bytes(payload).decode()
            elif enum_ == 2 and ewire == 2:
                value = payload
        if name is None:
            raise ValueError("map entry without a key")
        yield name, value


def _feature_lists(
    data: bytes | memoryview, where: str
) -> tuple[list[memoryview], list[memoryview]]:
    """The ``Features`` payloads of an Example (a SequenceExample's context) and the
    ``FeatureLists`` payloads of a SequenceExample."""
    features, lists = [], []
    for num, wire, payload in _fields(memoryview(data)):
        if num == 1 and wire == 2:
            features.append(payload)
        elif num == 2 and wire == 2:
            lists.append(payload)
        else:
            raise ValueError(f"unknown top-level field {num} (wire type {wire})")
    return features, lists


def _steps(name: str, payload: memoryview) -> tuple[int, list[memoryview]]:
    """The kind (``SEQ + kind``, or ``SEQ`` with no steps) and lists of a FeatureList's steps."""
    kind, lists = 0, []
    for num, wire, feature in _fields(payload):
        if num != 1 or wire != 2:
            continue
        k, lst = _feature_kind(name, feature)
        if kind and k and k != kind:
            raise ValueError(
                f"feature list {name!r} mixes {KIND_NAMES[kind]} and {KIND_NAMES[k]} steps"
            )
        kind = kind or k  # an empty Feature{} step is an empty step of the list's kind
        lists.append(lst)
    if lists and not kind:
        raise ValueError(f"feature list {name!r}: every step is an empty Feature (no kind)")
    return SEQ + kind, lists


def _entries(data: bytes, where: str) -> Iterator[tuple[str, int, memoryview | list[memoryview]]]:
    """(name, kind, list payload -- or the steps' payloads for a feature list) of each feature."""
    features, lists = _feature_lists(data, where)
    context: set[str] = set()
    for payload in features:
        for name, feature in _map_entries(payload):
            context.add(name)
            # kind 0: an empty Feature{} (valid; TensorFlow parses it), read as a missing feature
            yield (name, *_feature_kind(name, feature))
    for payload in lists:
        for name, fl in _map_entries(payload):
            if name in context:
                raise SchemaError(
                    f"{where}: {name!r} is both a context feature and a feature list of this "
                    "SequenceExample; one field cannot be both"
                )
            yield (name, *_steps(name, fl))


def _feature_kind(name: str, feature: memoryview) -> tuple[int, memoryview]:
    """The kind and list payload of a Feature; kind 0 for an empty ``Feature{}``."""
    kind, lst = 0, memoryview(b"")
    for knum, kwire, payload in _fields(feature):
        if knum in (BYTES, FLOAT, INT64) and kwire == 2:
            kind, lst = knum, payload
    return kind, lst


def decode_example(
    data: bytes, where: str = "", only: set[str] | None = None, views: bool = False
) -> dict[str, tuple[int, Any]]:
    """Parse a serialized Example into ``{name: (kind, values)}`` (a SequenceExample's
    feature lists as ``(SEQ + kind, [each step's values])``); with ``only``, the values
    of those features alone (the inference pass looks at a few byte strings). With
    ``views``, a feature's byte strings are memoryviews into ``data``, not copies."""
    try:
        out: dict[str, tuple[int, Any]] = {}
        for name, kind, lst in _entries(data, where):
            if (only is not None and name not in only) or kind == 0:
                continue  # kind 0, an empty Feature{}: missing, as TensorFlow's parser has it
            if kind > SEQ:
                assert isinstance(lst, list)  # for mypy: a feature list's steps
                out[name] = (kind, [_decode_list(kind - SEQ, step) for step in lst])
            elif kind == SEQ:
                out[name] = (kind, [])
            else:
                out[name] = (kind, _decode_list(kind, lst, views))  # type: ignore[arg-type]
        return out
    except DstoreError:
        raise
    except (ValueError, UnicodeDecodeError, IndexError) as e:
        raise CodecIOError(f"{where}: not a valid tf.train.Example: {e}") from None
