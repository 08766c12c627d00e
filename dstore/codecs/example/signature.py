"""What kind and size of value each feature of an Example holds, read without decoding
it: the signature foreign files are grouped and inferred by."""

from __future__ import annotations

from typing import Any

from ...errors import CodecIOError, DstoreError
from .wire import BYTES, FLOAT, SEQ, _entries, _fields

__all__ = ["FeatureSignature", "scan_example", "signature_of"]

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
