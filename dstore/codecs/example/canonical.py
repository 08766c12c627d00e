"""The fast path for Examples laid out the way dstore writes them (features in the
schema's order, one value list each): checked byte for byte, then sliced without a
general protobuf walk."""

from __future__ import annotations

from typing import Any

import numpy as np

from .wire import BYTES, FLOAT, _decode_varints, _read_varint

__all__ = ["decode_canonical", "is_canonical_example"]


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
