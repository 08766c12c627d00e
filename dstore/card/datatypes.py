"""What a stored field is in Croissant's words: its ``dataType`` and array shape.

The data type is the one of the values as stored (what a reader of the files
finds), never the one they were converted from. Croissant 1.1 names the
machine types numpy has (``cr:Float16`` ... ``cr:UInt64``); it has none for
bfloat16 and none for complex numbers, so those fields say what they are in
their description:

* bfloat16 values stored as ``uint16`` bits (zarr, HDF5, npz) are ``cr:UInt16``,
  stored widened to float32 (TFRecord, Parquet: exact) ``cr:Float32``; the
  description says how to read them back as bfloat16;
* an ml_dtypes bfloat16 array read as such is ``sc:Float``;
* complex values get no ``dataType`` (one a reader would take for real numbers
  would be wrong) and the description names their dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..model import Bytes, Image, Ragged, String, StringList, Tensor
from ..model.precision import PRECISION_ATTR
from ..model.schema import FieldSpec

__all__ = ["DataTypeOf", "array_shape", "data_type"]

#: numpy dtype name -> Croissant dataType (cr: is http://mlcommons.org/croissant/)
_NUMERIC = {
    "bool": "sc:Boolean",
    "float16": "cr:Float16",
    "float32": "cr:Float32",
    "float64": "cr:Float64",
    "int8": "cr:Int8",
    "int16": "cr:Int16",
    "int32": "cr:Int32",
    "int64": "cr:Int64",
    "uint8": "cr:UInt8",
    "uint16": "cr:UInt16",
    "uint32": "cr:UInt32",
    "uint64": "cr:UInt64",
}


class DataTypeOf:
    """A field's ``dataType`` (None: Croissant has none) and what its description must add."""

    def __init__(self, data_type: str | list[str] | None, note: str = "") -> None:
        self.data_type = data_type
        self.note = note


def _numeric(dtype: np.dtype) -> DataTypeOf:
    name = dtype.name
    if name == "bfloat16":
        return DataTypeOf(
            "sc:Float", "bfloat16 values (Croissant has no bfloat16 type: sc:Float stands for it)"
        )
    if dtype.kind == "c":
        return DataTypeOf(None, f"{name} values: Croissant has no complex type")
    return DataTypeOf(_NUMERIC[name])


def data_type(spec: FieldSpec, stored_as_image: bool = False) -> DataTypeOf:
    """The ``dataType`` of ``spec``'s stored values; ``stored_as_image``: the format keeps
    the field's pixels as encoded images (a Parquet Image column)."""
    kind = spec.kind
    if stored_as_image or (isinstance(kind, Image) and kind.encoding != "raw"):
        return DataTypeOf("sc:ImageObject")
    if isinstance(kind, Image):  # raw pixels: numbers that are an image
        return DataTypeOf([_NUMERIC[kind.dtype.name], "sc:ImageObject"])
    if isinstance(kind, (String, StringList)):
        return DataTypeOf("sc:Text")
    if isinstance(kind, Bytes):
        return DataTypeOf("sc:Text", "opaque bytes (sc:Text: Croissant has no bytes type)")
    assert isinstance(kind, (Tensor, Ragged))
    found = _numeric(kind.dtype)
    rec = spec.attrs.get(PRECISION_ATTR)
    if isinstance(rec, Mapping) and rec.get("policy") == "bfloat16":
        stored = kind.dtype.name
        how = "their bits" if stored == "uint16" else "widened exactly"
        found.note = f"bfloat16 values stored as {stored} ({how}; Croissant has no bfloat16 type)"
    return found


def array_shape(spec: FieldSpec, stored_as_image: bool = False) -> dict[str, Any]:
    """``isArray``/``arrayShape`` of a record of ``spec`` (nothing for a scalar, a string or
    an encoded image); -1 is an axis whose length varies between records."""
    kind = spec.kind
    if stored_as_image:
        return {}
    shape: tuple[int, ...] | None
    if isinstance(kind, Tensor):
        shape = kind.shape
    elif isinstance(kind, Ragged):
        shape = (-1, *kind.inner_shape)
    elif isinstance(kind, StringList):
        shape = (-1,)
    elif isinstance(kind, Image) and kind.encoding == "raw":
        shape = kind.shape or (-1, -1, *([] if kind.channels == 0 else [kind.channels or -1]))
    else:
        shape = None
    if not shape:
        return {}
    return {"isArray": True, "arrayShape": ",".join(str(n) for n in shape)}
