"""How each field kind becomes one tar member of a sample, and back.

A sample is the members ``<key>.<field>.<ext>``; the extension says what the
bytes are, which is all WebDataset's decoders look at:

============================== ============ =================================
field                          member       ``WebDataset(...).decode()`` gives
============================== ============ =================================
raw image / image-like tensor  ``.png``     bytes (``decode("rgb8")``: pixels)
  (``-o image_codec=``)        ``.jpg``, ``.webp`` (lossy)
encoded image                  its own: ``.png``, ``.jpg``, ``.webp``, ...
integer scalar                 ``.cls``     ``int`` (decimal text)
other tensors, ragged records  ``.npy``     ndarray (``np.lib.format``)
string                         ``.txt``     ``str`` (UTF-8)
list of strings                ``.json``    ``list[str]``
list of byte strings           ``.json``    ``list[str]`` of base64
bytes                          ``.bin``     bytes
============================== ============ =================================

Field names are escaped into one member-name part (:func:`dstore.model.names.escape_dotless`):
:func:`dstore.model.names.escape` (``/``, ``\\``, ``%``, ``~``, control characters,
a leading ``.``) and then every ``.`` as ``%2E``, so WebDataset's split of a
member name at its first and last dot always finds the key and the field.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CodecIOError, UnsupportedDtypeError
from ...model import Image, Ragged, String, StringList, Tensor, names
from ...model.schema import FieldSpec
from .._imagecodec import LossyImage, is_image_like
from .._npy import npy_bytes, read_npy
from .._pixels import decode_pixels, lossy_of

__all__ = ["ENCODINGS", "FieldEncoding", "choose_encoding", "decode_value"]

#: encoding -> member extension (None: the encoded image's own)
ENCODINGS: dict[str, str | None] = {
    "png": "png",
    "jpeg": "jpg",
    "webp": "webp",
    "encoded": None,
    "cls": "cls",
    "npy": "npy",
    "txt": "txt",
    "json": "json",
    "json-base64": "json",
    "bin": "bin",
}
#: an encoded Image's member extension by its encoding, and back (foreign tars)
IMAGE_EXT = {"jpeg": "jpg", "tiff": "tif"}
EXT_IMAGE = {"png": "png", "jpg": "jpeg", "jpeg": "jpeg", "webp": "webp"}


@dataclass(frozen=True)
class FieldEncoding:
    """A field's member suffix in a sample (``x.png``; a foreign ``jpg``) and encoding."""

    suffix: str
    encoding: str
    quality: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"member": self.suffix, "encoding": self.encoding}
        if self.quality is not None:
            out["quality"] = self.quality
        return out

    @classmethod
    def table(cls, fields: dict[str, Any]) -> dict[str, FieldEncoding]:
        """Field name -> encoding, from a manifest's ``fields`` entry of one split."""
        return {n: cls(e["member"], e["encoding"], e.get("quality")) for n, e in fields.items()}

    @property
    def lossy(self) -> LossyImage | None:
        return lossy_of(self.encoding, self.quality)


def _lossy_hint(e: UnsupportedDtypeError) -> UnsupportedDtypeError:
    # _imagecodec names zarr's lossless setting; ours is png
    return UnsupportedDtypeError(str(e).replace("image_codec=none", "image_codec=png"))


def choose_encoding(spec: FieldSpec, lossy: LossyImage | None) -> FieldEncoding:
    """How ``spec`` is stored; raw images take ``lossy`` (refused by name when they cannot)."""
    kind = spec.kind
    if isinstance(kind, Image) and kind.encoding != "raw":
        enc, ext = "encoded", IMAGE_EXT.get(kind.encoding, kind.encoding)
    elif isinstance(kind, Image) or (isinstance(kind, Tensor) and is_image_like(spec)):
        enc = "png" if lossy is None else lossy.format
        if lossy is not None:
            try:
                lossy.check_field(spec, "webdataset", images_option=False)
            except UnsupportedDtypeError as e:
                raise _lossy_hint(e) from None
        ext = str(ENCODINGS[enc])
    elif isinstance(kind, Tensor) and kind.shape == () and kind.dtype.kind in "iu":
        enc, ext = "cls", "cls"
    elif isinstance(kind, (Tensor, Ragged)):
        enc, ext = "npy", "npy"
    elif isinstance(kind, String):
        enc, ext = "txt", "txt"
    elif isinstance(kind, StringList):
        enc, ext = ("json" if kind.text else "json-base64"), "json"
    else:
        enc, ext = "bin", "bin"
    quality = lossy.quality if lossy is not None and enc == lossy.format else None
    # escaped, no "." or "/" left: WebDataset's split at dots finds the key and the field
    return FieldEncoding(f"{names.escape_dotless(spec.name)}.{ext}", enc, quality)


def encode_value(enc: FieldEncoding, spec: FieldSpec, value: Any, png: Any) -> bytes:
    """A member's bytes from one record (an ndarray, str, bytes or list)."""
    e = enc.encoding
    if e in ("encoded", "bin"):
        return bytes(value)
    if e == "txt":
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if e == "json":
        text = [s.decode("utf-8") for s in value]  # valid UTF-8: checked when read
        return json.dumps(text, ensure_ascii=False, separators=(",", ":")).encode()
    if e == "json-base64":
        return json.dumps([base64.b64encode(bytes(b)).decode() for b in value]).encode()
    if e == "cls":
        return str(int(value)).encode()
    if (lossy := enc.lossy) is not None:
        return lossy.encode(np.asarray(value))
    if e == "png":
        img = np.asarray(value)
        return bytes(png(np.ascontiguousarray(img, dtype=img.dtype.newbyteorder("="))))
    # astype: indexing a 1-d array gives a native-endian scalar; keep the field's byte order
    return npy_bytes(np.asarray(value).astype(spec.dtype))


def _npy(spec: FieldSpec, data: bytes, where: str) -> np.ndarray:
    arr = read_npy(data, where)
    want = spec.shape if isinstance(spec.kind, Tensor) else None
    ok = arr.dtype == spec.dtype and (
        arr.shape == want if want is not None else arr.shape[1:] == spec.shape and arr.ndim >= 1
    )
    if not ok:
        shown = spec.kind.describe()
        raise CodecIOError(f"{where}: .npy holds {arr.dtype} {arr.shape}, field is {shown}")
    return arr


def _json_list(data: bytes, where: str) -> list[str]:
    try:
        value = json.loads(data)
    except ValueError as e:
        raise CodecIOError(f"{where}: not JSON: {e}") from None
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise CodecIOError(f"{where}: JSON is not a list of strings")
    return value


def decode_value(enc: FieldEncoding, spec: FieldSpec, data: bytes, where: str) -> Any:
    """One record from a member's bytes (bytes for String/Bytes/encoded images)."""
    e = enc.encoding
    if e in ("encoded", "bin", "txt"):
        return data
    if e == "cls":
        try:
            return np.asarray(int(data), spec.dtype)
        except (ValueError, OverflowError):
            raise CodecIOError(
                f"{where}: .cls is not a {spec.dtype} integer: {data[:40]!r}"
            ) from None
    if e == "npy":
        return _npy(spec, data, where)
    if e == "json":
        return _json_list(data, where)
    if e == "json-base64":
        try:
            return [base64.b64decode(s, validate=True) for s in _json_list(data, where)]
        except ValueError:
            raise CodecIOError(f"{where}: a string is not base64") from None
    return decode_pixels(data, spec, enc.lossy, where)
