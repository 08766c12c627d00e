"""How each dstore field is stored in Parquet: its Arrow type and its Hub feature.

One :class:`Storage` per field names what a column holds, and both halves of
the codec agree on it (the writer records it in ``dstore.json``; a foreign
file's is inferred by :mod:`~dstore.codecs.parquet.infer`):

============  ==========================  =======================================
encoding      Arrow type                  Hub feature (``datasets``)
============  ==========================  =======================================
``value``     number, or lists of them    ``Value``; ``List`` (with ``length``
              (fixed-size per fixed axis; for each fixed axis); ``ClassLabel``
              complex: a trailing pair)   for a labelled integer scalar
``png`` ...   struct<bytes, path>         ``Image``: pixels encoded by dstore
``image``     struct<bytes, path>         ``Image``: encoded bytes as they came
``string``    string                      ``Value("string")``
``binary``    binary                      ``Value("binary")``
``strings``   list<string|binary>         ``List(Value("string"|"binary"))``
============  ==========================  =======================================

Fixed axes are Arrow fixed-size lists, which ``datasets`` reads back as
``List(..., length=n)`` and formats as arrays of the field's shape. An axis of
length 0 cannot be a fixed-size list (Arrow refuses size 0), so a shape with a
0 stores every axis as a variable list: the counts stay in the list offsets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.schema import FieldSpec
from .._imagecodec import LOSSY_FORMATS, LossyImage
from .._pixels import lossy_of

__all__ = ["PIXEL_ENCODINGS", "Storage", "arrow_type", "hf_feature", "value_dims"]

#: encodings of pixels dstore encodes itself (decoded back to pixels on read)
PIXEL_ENCODINGS = ("png", *LOSSY_FORMATS)
ENCODINGS = ("value", "image", "string", "binary", "strings", *PIXEL_ENCODINGS)
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


@dataclass(frozen=True)
class Storage:
    """What a column holds; ``quality`` for lossy pixels, ``class_names`` for a ClassLabel."""

    encoding: str
    quality: int | None = None
    class_names: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"encoding": self.encoding}
        if self.quality is not None:
            out["quality"] = self.quality
        if self.class_names is not None:
            out["class_names"] = list(self.class_names)
        return out

    @classmethod
    def from_json(cls, data: Any) -> Storage:
        enc = data["encoding"]
        if enc not in ENCODINGS:
            raise ValueError(f"unknown encoding {enc!r}")
        names = data.get("class_names")
        return cls(enc, data.get("quality"), None if names is None else tuple(map(str, names)))

    @property
    def lossy(self) -> LossyImage | None:
        return lossy_of(self.encoding, self.quality)

    @property
    def is_image(self) -> bool:
        return self.encoding == "image" or self.encoding in PIXEL_ENCODINGS


def value_dims(spec: FieldSpec) -> tuple[np.dtype, tuple[int, ...]]:
    """The real dtype a ``value`` column stores and the axes of one record below it
    (complex numbers as a trailing pair of their real and imaginary parts)."""
    dtype = spec.dtype.newbyteorder("=")
    shape = spec.shape
    if dtype.kind == "c":
        return np.dtype(f"f{dtype.itemsize // 2}"), (*shape, 2)
    return dtype, shape


def _wrap(t: pa.DataType, dims: tuple[int, ...], fixed: bool) -> pa.DataType:
    for d in reversed(dims):
        t = pa.list_(t, d) if fixed else pa.list_(t)
    return t


def arrow_type(spec: FieldSpec, storage: Storage) -> pa.DataType:
    """The Arrow type of the column ``spec`` is stored in."""
    enc = storage.encoding
    if storage.is_image:
        return IMAGE_TYPE
    if enc == "string":
        return pa.string()
    if enc == "binary":
        return pa.binary()
    if enc == "strings":
        assert isinstance(spec.kind, StringList)
        return pa.list_(pa.string() if spec.kind.text else pa.binary())
    dtype, dims = value_dims(spec)
    t = _wrap(pa.from_numpy_dtype(dtype), dims, 0 not in dims)
    return pa.list_(t) if isinstance(spec.kind, Ragged) else t


def _value(dtype: str) -> dict[str, Any]:
    return {"dtype": dtype, "_type": "Value"}


def _list(feature: dict[str, Any], length: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"feature": feature}
    if length is not None:
        out["length"] = length
    out["_type"] = "List"
    return out


def hf_feature(spec: FieldSpec, storage: Storage) -> dict[str, Any]:
    """The column's feature as ``datasets`` writes it in the ``huggingface`` metadata."""
    enc = storage.encoding
    if storage.is_image:
        return {"_type": "Image"}
    if enc in ("string", "binary"):
        return _value(enc)
    if enc == "strings":
        assert isinstance(spec.kind, StringList)
        return _list(_value("string" if spec.kind.text else "binary"))
    if storage.class_names is not None:
        return {"names": list(storage.class_names), "_type": "ClassLabel"}
    dtype, dims = value_dims(spec)
    feature = _value(dtype.name)
    fixed = 0 not in dims
    for d in reversed(dims):
        feature = _list(feature, d if fixed else None)
    return _list(feature) if isinstance(spec.kind, Ragged) else feature


def choose_storage(
    spec: FieldSpec,
    images: set[str] | None,
    lossy: LossyImage | None,
    class_names: tuple[str, ...] | None,
) -> Storage:
    """How a field is written: pixels as Images (``images`` None = every image-like
    field), encoded images as they are, text and bytes as such, numbers as values."""
    from .._imagecodec import is_image_like

    kind = spec.kind
    if isinstance(kind, Image) and kind.encoding != "raw":
        return Storage("image")
    pixels = isinstance(kind, Image) or (
        isinstance(kind, Tensor) and is_image_like(spec) and images is None
    )
    if images is not None:
        pixels = spec.name in images
    if pixels:
        return Storage(lossy.format, lossy.quality) if lossy else Storage("png")
    if isinstance(kind, String):
        return Storage("string")
    if isinstance(kind, Bytes):
        return Storage("binary")
    if isinstance(kind, StringList):
        return Storage("strings")
    return Storage("value", class_names=class_names)
