"""One array as ``.npy`` bytes and back, never through pickle.

For formats whose records or members are ``.npy`` files (WebDataset's ``.npy``
members; an npz is ``.npy`` files in a zip): :func:`npy_bytes` writes one,
:func:`read_npy` reads one (an object array is refused by numpy), and
:func:`npy_header` reads what an ``.npy`` inside a larger file declares --
its dtype and shape -- from its header alone, never its data.
"""

from __future__ import annotations

import io
import math
from typing import IO

import numpy as np

from ...errors import CodecIOError, SchemaError
from ...parallel import NPY_HEADER_LOCK

__all__ = ["npy_bytes", "npy_header", "read_npy"]


def npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` as an ``.npy`` file (its dtype's byte order kept)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=False)
    return buf.getvalue()


def read_npy(data: bytes, where: str) -> np.ndarray:
    """The array of an ``.npy`` file's bytes; anything unreadable is one line naming
    ``where``. The bytes its header declares must be there before anything is
    allocated: a 10 kB member declaring ``(10**12,)`` float64 is refused, not 7 TiB
    asked of the allocator (numpy's ``MemoryError``)."""
    dtype, shape, fortran = _header(io.BytesIO(data), 0, len(data), where)
    count = math.prod(shape)
    declared = count * dtype.itemsize
    start = _header_length(data)
    held = len(data) - start
    if declared > held:
        raise CodecIOError(
            f"{where}: the .npy declares {dtype} {shape} ({declared:,} bytes) "
            f"and holds {held:,} bytes of data"
        )
    try:  # the data as numpy's read_array takes it: count items after the header
        flat = np.frombuffer(data, dtype, count=count, offset=start)
        return flat.reshape(shape, order="F" if fortran else "C").copy(order="K")
    except ValueError:  # what frombuffer does not take (items of no size): numpy's reader
        pass
    try:  # never pickle: an object array is refused by numpy here
        return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise CodecIOError(f"{where}: not a readable .npy: {e}") from None


def _header_length(data: bytes) -> int:
    """Bytes before an ``.npy``'s data (magic, version, length field and header); the
    caller checked the version with :func:`npy_header`."""
    head_at = 10 if data[6] == 1 else 12
    return head_at + int.from_bytes(data[8:head_at], "little")


#: headers parsed, by their bytes: the records of a field share one (one dtype and
#: shape), and numpy parses each with ``ast.literal_eval`` under a lock (about 0.1 ms,
#: as long as decoding the record's PNG beside it took)
_PARSED: dict[bytes, tuple[np.dtype, tuple[int, ...], bool]] = {}
_PARSED_MAX = 256


def npy_header(f: IO[bytes], start: int, size: int, where: str) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape the ``.npy`` of ``size`` bytes at ``start`` of ``f`` declares
    (its header only: nothing past it, nor past ``size``, is read)."""
    dtype, shape, _ = _header(f, start, size, where)
    return dtype, shape


def _header(
    f: IO[bytes], start: int, size: int, where: str
) -> tuple[np.dtype, tuple[int, ...], bool]:
    """:func:`npy_header` and whether the data is in Fortran order."""
    f.seek(start)
    pre = f.read(min(size, 12))
    major = pre[6] if len(pre) >= 10 and pre[:6] == b"\x93NUMPY" else 0
    if major not in (1, 2):
        raise CodecIOError(f"{where}: not an .npy of format version 1 or 2")
    head_at = 10 if major == 1 else 12
    f.seek(start)
    head_bytes = f.read(min(size, head_at + int.from_bytes(pre[8:head_at], "little")))
    parsed = _PARSED.get(head_bytes)
    if parsed is not None:
        return parsed
    head = io.BytesIO(head_bytes)
    head.seek(8)
    read = (
        np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    )
    try:
        with NPY_HEADER_LOCK:
            shape, fortran, dtype = read(head)
    except ValueError as e:
        raise CodecIOError(f"{where}: not a readable .npy: {e}") from None
    if dtype.hasobject:
        raise SchemaError(f"{where}: .npy of Python objects (would need pickle) is refused")
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    parsed = _PARSED[head_bytes] = (dtype, tuple(shape), bool(fortran))
    return parsed
