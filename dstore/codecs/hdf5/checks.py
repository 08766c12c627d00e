"""Checks of a foreign HDF5 file's datasets before any is read: filters that are
installed, UTF-8 text, dtypes dstore carries; remote files staged locally."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from typing import Any

import h5py
import numpy as np

from ... import fs
from ..._dist import install_hint
from ...errors import CodecIOError, SchemaError, UnsupportedDtypeError
from ...model import VarColumn
from ...model.schema import FieldSpec


def _is_vlunicode(arr: Any) -> bool:
    """A PyTables ``VLUnicodeAtom`` array: vlen uint32 code points, marked ``PSEUDOATOM``."""
    if not isinstance(arr, h5py.Dataset) or h5py.check_vlen_dtype(arr.dtype) != np.uint32:
        return False
    mark = arr.attrs.get("PSEUDOATOM")
    return (mark.decode() if isinstance(mark, bytes) else str(mark)) == "vlunicode"


def _enum_or(spec: FieldSpec) -> Any:
    """The field's dtype, as the HDF5 enum it was read from when its labels came along
    (``attrs["enum"]``) and it is still an integer field (a cast drops the labels)."""
    labels = spec.attrs.get("enum")
    if isinstance(labels, dict) and labels and spec.dtype.kind in "iu":
        return h5py.enum_dtype({str(k): int(v) for k, v in labels.items()}, basetype=spec.dtype)
    return spec.dtype


def _check_filters(ds: Any, where: str) -> None:
    plist = ds.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        fid, _, _, fname = plist.get_filter(i)
        if not h5py.h5z.filter_avail(fid):
            name = fname.decode(errors="replace") if isinstance(fname, bytes) else str(fname)
            raise CodecIOError(
                f"{where}: compressed with HDF5 filter {fid} ({name}), which is not installed "
                f"({install_hint('hdf5-plugins')} may provide it)"
            )


def _check_utf8(col: VarColumn, where: str, start: int) -> None:
    """:meth:`VarColumn.check_utf8` naming the record in the dataset, not in the column
    read from ``start`` (``verify`` re-reads a failing range one record at a time, and
    said "record 0" of every record it pinned)."""
    try:
        col.check_utf8(where)
    except SchemaError as e:
        found = re.match(rf"{re.escape(where)}, record (\d+)", str(e))
        if found is None:
            raise
        rest = str(e)[found.end() :]
        raise SchemaError(f"{where}, record {start + int(found.group(1))}{rest}") from None


def _stage_remote(url: str) -> str:
    """A local copy of a remote HDF5 file, for h5py to open by name.

    h5py could read the fsspec file object itself (ranged GETs), but it holds its
    global lock while it calls a file object, and an fsspec file waits there on
    fsspec's event-loop thread; a garbage collection on that thread which frees an
    h5py object waits for the same lock, and the process hangs (h5py issue 2019).
    Pausing the collector around each read leaves a window (a collection already
    running on that thread), which the test suite hit; a local copy leaves none."""
    fd, local = tempfile.mkstemp(prefix="dstore-h5-", suffix=".h5")
    try:
        with os.fdopen(fd, "wb") as out, fs.open_binary(url) as src:
            shutil.copyfileobj(src, out, fs.READ_BLOCK)
    except BaseException as e:
        os.unlink(local)
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError):
            raise CodecIOError(f"{url}: could not copy it to local disk for h5py: {e}") from None
        raise
    return local


def _check_field_dataset(member: Any, where: str) -> None:
    """A dataset dstore reads as a field: a supported dtype, a record axis (exactly one
    for strings and vlen data) and filters it can decode."""
    dtype = member.dtype
    if h5py.check_string_dtype(dtype) is not None or h5py.check_vlen_dtype(dtype) is not None:
        if member.ndim != 1:
            raise UnsupportedDtypeError(
                f"{where}: strings or vlen data need exactly one (record) axis"
            )
    elif dtype.kind in "UO":
        raise UnsupportedDtypeError(f"{where}: dtype {dtype} is not supported")
    elif dtype.fields is not None:
        raise UnsupportedDtypeError(f"{where}: compound dtype {dtype} is not supported")
    elif dtype.kind not in "biufcS":
        raise UnsupportedDtypeError(f"{where}: dtype {dtype} is not supported")
    if member.ndim == 0:
        raise UnsupportedDtypeError(f"{where}: scalar dataset has no record axis")
    _check_filters(member, where)
