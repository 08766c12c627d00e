"""Fixed-width numpy strings (``<U``/``S``) <-> values + offsets, without a Python object per record.

numpy stores text as fixed-width UTF-32 (``<U``) and bytes as fixed-width
``S`` items, both padded with NULs that numpy strips on read. Formats that
hold such arrays (npz, HDF5 fixed strings) meet them here: whole batches are
converted with array arithmetic, so a million strings are a few numpy calls.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import CodecIOError
from . import VarColumn

__all__ = [
    "bytes_to_fixed",
    "char_counts",
    "ends_with_nul",
    "first_invalid_utf8",
    "fixed_to_column",
    "utf8_to_fixed_unicode",
]


def first_invalid_utf8(items: Iterable[bytes]) -> tuple[int, int] | None:
    """The first of ``items`` that is not valid UTF-8 and the byte where it fails, or None."""
    for j, b in enumerate(items):
        try:
            b.decode("utf-8")
        except UnicodeDecodeError as e:
            return j, e.start
    return None


def _trimmed_lengths(units: np.ndarray) -> np.ndarray:
    """Per row of a (n, w) array: the length without trailing zeros."""
    n, w = units.shape
    if w == 0 or n == 0:
        return np.zeros(n, np.int64)
    nonzero = units != 0
    last = w - np.argmax(nonzero[:, ::-1], axis=1)
    return np.where(nonzero.any(axis=1), last, 0).astype(np.int64)


#: above this many bytes, fixed-width arrays are filled record by record (index arrays
#: of 8-byte positions per byte would take many times the records' size)
_VECTOR_BYTES = 1 << 20


def _row_length(row: np.ndarray) -> int:
    """A row's length without trailing zeros, looking at 1 MiB from its end at a time."""
    end = len(row)
    while end > 0:
        lo = max(0, end - (1 << 20))
        nonzero = row[lo:end] != 0
        if nonzero.any():
            return end - int(np.argmax(nonzero[::-1]))
        end = lo
    return 0


def _wide_fixed_to_column(units: np.ndarray) -> VarColumn:
    """:func:`fixed_to_column` of large ``S`` items, as (n, width) bytes: no mask or bool
    array of the batch's size, and no copy at all when no item has trailing NULs."""
    lengths = np.array([_row_length(row) for row in units], np.int64)
    offsets = np.zeros(len(units) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if (lengths == units.shape[1]).all():
        return VarColumn(units.reshape(-1), offsets)
    values = np.empty(int(offsets[-1]), np.uint8)
    for i, row in enumerate(units):
        values[offsets[i] : offsets[i + 1]] = row[: lengths[i]]
    return VarColumn(values, offsets)


def fixed_to_column(arr: np.ndarray, where: str) -> VarColumn:
    """A 1-d ``<U``/``S`` array as a String/Bytes column (UTF-8 / raw bytes), numpy's NUL rule."""
    n = len(arr)
    if arr.dtype.kind == "S" and n * arr.dtype.itemsize > _VECTOR_BYTES:
        return _wide_fixed_to_column(np.ascontiguousarray(arr).view(np.uint8).reshape(n, -1))
    if arr.dtype.kind == "S":
        w = arr.dtype.itemsize
        units = np.ascontiguousarray(arr).view(np.uint8).reshape(n, w)
        lengths = _trimmed_lengths(units)
        mask = np.arange(w) < lengths[:, None]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return VarColumn(units[mask], offsets)
    w = arr.dtype.itemsize // 4
    codes = np.ascontiguousarray(arr).view(
        arr.dtype.byteorder + "u4" if arr.dtype.byteorder in "<>" else "=u4"
    )
    codes = codes.astype("<u4", copy=False).reshape(n, w)
    lengths = _trimmed_lengths(codes)
    mask = np.arange(w) < lengths[:, None]
    flat = codes[mask]
    try:
        text = flat.tobytes().decode("utf-32-le")
        data = text.encode("utf-8")
    except UnicodeError:
        bad = next(i for i in range(n) if not _valid_codes(codes[i, : lengths[i]]))
        raise CodecIOError(
            f"{where}, record {bad}: not valid Unicode (a surrogate or code point > U+10FFFF)"
        ) from None
    # UTF-8 bytes per code point, summed per record
    per_code = 1 + (flat >= 0x80) + (flat >= 0x800) + (flat >= 0x10000)
    record = np.repeat(np.arange(n), lengths)
    byte_lengths = np.bincount(record, weights=per_code, minlength=n).astype(np.int64)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(byte_lengths, out=offsets[1:])
    return VarColumn(np.frombuffer(data, np.uint8), offsets)


def _valid_codes(codes: np.ndarray) -> bool:
    try:
        codes.astype("<u4").tobytes().decode("utf-32-le")
    except UnicodeError:
        return False
    return True


def char_counts(col: VarColumn) -> np.ndarray:
    """Characters per record of a UTF-8 column (bytes that do not continue a character).
    Beyond :data:`_VECTOR_BYTES`, record by record: a record number and a weight of
    eight bytes per byte of text would cost many times the text (700 MB for 40 MB)."""
    n, values = len(col), col.flat_values
    if int(col.offsets[-1]) <= _VECTOR_BYTES:
        starts = (values & 0xC0) != 0x80
        record = np.repeat(np.arange(n), col.lengths)
        return np.bincount(record, weights=starts, minlength=n).astype(np.int64)
    return np.array(
        [
            np.count_nonzero((values[a:b] & 0xC0) != 0x80)
            for a, b in zip(col.offsets[:-1].tolist(), col.offsets[1:].tolist(), strict=True)
        ],
        np.int64,
    )


def ends_with_nul(col: VarColumn) -> bool:
    """True when any record ends in a NUL byte (numpy's fixed-width strings would drop it)."""
    nonempty = col.lengths > 0
    return bool(nonempty.any() and (col.flat_values[col.offsets[1:][nonempty] - 1] == 0).any())


def utf8_to_fixed_unicode(col: VarColumn, width: int) -> np.ndarray:
    """A String column as a ``<U{width}`` array (records must not end in NUL)."""
    n = len(col)
    chars = char_counts(col)
    out = np.zeros((n, max(width, 1)), "<u4")
    text = col.flat_values.tobytes().decode("utf-8")
    codes = np.frombuffer(text.encode("utf-32-le"), "<u4")
    record = np.repeat(np.arange(n), chars)
    within = np.arange(len(codes)) - np.repeat(np.cumsum(chars) - chars, chars)
    out[record, within] = codes
    return out.view(f"<U{max(width, 1)}").reshape(n)


def bytes_to_fixed(col: VarColumn, width: int) -> np.ndarray:
    """A Bytes column as an ``S{width}`` array (records must not end in NUL)."""
    n = len(col)
    out = np.zeros((n, max(width, 1)), np.uint8)
    values = col.flat_values
    if len(values) > _VECTOR_BYTES:
        # the index arrays below take 16 bytes per byte: large records are copied one by one
        for i in range(n):
            lo, hi = int(col.offsets[i]), int(col.offsets[i + 1])
            out[i, : hi - lo] = values[lo:hi]
        return out.view(f"S{max(width, 1)}").reshape(n)
    record = np.repeat(np.arange(n), col.lengths)
    within = np.arange(len(values)) - np.repeat(col.offsets[:-1], col.lengths)
    out[record, within] = values
    return out.view(f"S{max(width, 1)}").reshape(n)
