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
    "FeatureSignature",
    "decode_canonical",
    "decode_example",
    "encode_example",
    "encode_feature",
    "encode_feature_list",
    "encode_sequence_example",
    "encode_varints",
    "is_canonical_example",
    "scan_example",
    "signature_of",
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


#: (kind, number of values, PNG header / b"jpeg" / None): what must agree between
#: records for a feature to be a fixed-shape field.
FeatureSignature = tuple[int, int, bytes | None]
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_SIGNATURE = b"\xff\xd8\xff"
_LOW_BYTES = bytes(range(0x80))  # a packed varint ends at each byte below 0x80


def _count_values(kind: int, lst: memoryview) -> tuple[int, bytes | None]:
    n = 0
    png = None
    for num, wire, p in _fields(lst):
        if num != 1:
            continue
        if kind == BYTES:
            n += 1
            # the IHDR chunk (size, bit depth, colour type) without decoding the image
            if n == 1:
                head = bytes(p[:8])
                if head == _PNG_SIGNATURE:
                    png = bytes(p[8:26])
                elif head[:3] == _JPEG_SIGNATURE:
                    png = b"jpeg"  # a JPEG: its size is not needed, its kind is
                else:
                    png = None
        elif wire == 2:
            size = len(p)
            n += size // 4 if kind == FLOAT else size - len(bytes(p).translate(None, _LOW_BYTES))
        else:
            n += 1
    return n, png if n == 1 else None


def _head(value: bytes) -> bytes | None:
    """What :func:`_count_values` reports for a list of one byte string."""
    head = value[:8]
    if head == _PNG_SIGNATURE:
        return bytes(value[8:26])
    if head[:3] == _JPEG_SIGNATURE:
        return b"jpeg"
    return None


def signature_of(values: dict[str, tuple[int, Any]]) -> dict[str, FeatureSignature]:
    """:func:`scan_example` of an Example from its decoded values (no feature lists:
    from :func:`decode_canonical`)."""
    return {
        name: (kind, len(v), _head(v[0]) if kind == BYTES and len(v) == 1 else None)
        for name, (kind, v) in values.items()
    }


def scan_example(data: bytes, where: str = "") -> dict[str, FeatureSignature]:
    """``{name: (kind, number of values, PNG header)}`` of an Example, without decoding values.

    The cheap pass schema inference runs over every record: a PNG's size is
    read from its header, packed lists are counted, nothing is decoded."""
    try:
        out: dict[str, FeatureSignature] = {}
        for name, kind, lst in _entries(data, where):
            if kind >= SEQ:
                assert isinstance(lst, list)  # for mypy: a feature list's steps
                counts = {_count_values(kind - SEQ, step)[0] for step in lst}
                # the values per step, when every step has as many: a step's shape
                per = str(counts.pop()).encode() if len(counts) == 1 else (b"*" if counts else b"")
                out[name] = (kind, len(lst), per)
            elif kind == 0:  # an empty Feature{}: no values and no kind
                out[name] = (0, 0, None)
            else:
                out[name] = (kind, *_count_values(kind, lst))  # type: ignore[arg-type]
        return out
    except DstoreError:
        raise
    except (ValueError, UnicodeDecodeError, IndexError) as e:
        raise CodecIOError(f"{where}: not a valid tf.train.Example: {e}") from None


# ------------------------------------------------------------ canonical form check


def _length_at(buf: bytes, pos: int) -> tuple[int, int]:
    """A length varint at ``pos`` and the position after it; IndexError unless minimal."""
    n = buf[pos]
    if n < 0x80:
        return n, pos + 1
    n, end = _read_varint(buf, pos)  # type: ignore[arg-type]
    if buf[end - 1] == 0:  # a trailing zero group: not the shortest form
        raise IndexError("non-minimal varint")
    return n, end


def is_canonical_example(data: bytes, features: list[tuple[bytes, int]]) -> bool:
    """True when ``data`` is byte for byte what :func:`encode_example` writes from its
    own decoded values: one ``Features`` whose entries are exactly ``features``
    (UTF-8 name, kind) in that order, each entry a key then a value, each Feature
    one list of that kind, byte strings one field each, numbers one packed field
    (none for an empty list), every length and varint in its shortest form.

    A serialized Example that passes can be written again as it is instead of
    re-encoding its values: the bytes are the same."""
    return decode_canonical(data, features) is not None


def decode_canonical(
    data: bytes, features: list[tuple[bytes, int]], views: bool = False
) -> dict[str, tuple[int, Any]] | None:
    """:func:`decode_example` of an Example in canonical form (see
    :func:`is_canonical_example`), the same values in one walk; None for any
    other Example (decode it with :func:`decode_example`). With ``views``, byte
    strings are memoryviews into ``data``."""
    out: dict[str, tuple[int, Any]] = {}
    try:
        ok = _canonical(data, features, out, views)
    except (IndexError, ValueError):
        return None
    return out if ok else None


def _canonical_ints(p: bytes) -> np.ndarray | None:
    """Packed varints each in their shortest form (negatives: 10 bytes ending 0x01), as
    :func:`encode_varints` writes them, decoded; None when one is not."""
    if len(p) > 64:
        b = np.frombuffer(p, np.uint8)
        if b[-1] & 0x80:
            return None
        ends = np.flatnonzero(b < 0x80)
        lengths = np.diff(ends, prepend=-1)
        last = b[ends]
        if (
            (lengths > 10).any()
            or ((lengths > 1) & (last == 0)).any()
            or ((lengths == 10) & (last != 1)).any()
        ):
            return None
        return _decode_varints(p)
    vals = []
    run = value = 0
    for byte in p:
        if byte & 0x80:
            value |= (byte & 0x7F) << (7 * run)
            run += 1
            continue
        if (run and byte == 0) or (run == 9 and byte != 1) or run > 9:
            return None
        vals.append(value | (byte << (7 * run)))
        run = value = 0
    if run:
        return None
    return np.array(vals, np.uint64).view(np.int64)


def _tagged(b: bytes, pos: int, tag: int) -> tuple[int, int]:
    """The length after the one-byte field tag ``tag`` at ``pos`` and where its bytes
    start; ValueError when the tag differs (not the canonical form)."""
    if b[pos] != tag:
        raise ValueError("not the canonical form")
    return _length_at(b, pos + 1)


def _canonical(
    b: bytes, features: list[tuple[bytes, int]], out: dict[str, tuple[int, Any]], views: bool
) -> bool:
    """Fill ``out`` from an Example in canonical form; False (or ValueError,
    IndexError) for any other."""
    end = len(b)
    source = memoryview(b) if views else b  # what byte strings are sliced from
    if not end:
        return False
    n, pos = _tagged(b, 0, 0x0A)  # Example.features
    if pos + n != end:
        return False
    for name, kind in features:
        n, pos = _tagged(b, pos, 0x0A)  # Features.feature: one map entry
        entry_end = pos + n
        n, pos = _tagged(b, pos, 0x0A)  # its key
        if n != len(name) or not b.startswith(name, pos):
            return False
        n, pos = _tagged(b, pos + n, 0x12)  # its value: a Feature
        if pos + n != entry_end:
            return False
        n, pos = _tagged(b, pos, 0x08 * kind + 2)  # the Feature's one list
        if pos + n != entry_end:
            return False
        values: Any
        if kind == BYTES:
            values = []
            while pos < entry_end:
                n, pos = _tagged(b, pos, 0x0A)
                values.append(source[pos : pos + n])
                pos += n
            if pos != entry_end:
                return False
        elif not n:
            values = np.empty(0, np.float32 if kind == FLOAT else np.int64)
        else:
            n, pos = _tagged(b, pos, 0x0A)  # one packed field
            if not n or pos + n != entry_end:
                return False
            if kind == FLOAT:
                if n % 4:
                    return False
                values = np.frombuffer(b, "<f4", n // 4, pos).astype(np.float32, copy=False)
            else:
                values = _canonical_ints(b[pos:entry_end])
                if values is None:
                    return False
            pos = entry_end
        out[name.decode()] = (kind, values)
    return pos == end
