"""One record of a field as the bytes of a file of its own, and back: for formats that
store each record's field as a file (WebDataset's tar members).

:data:`ENCODINGS` names each way (what manifests store): ``encoded``, ``bin`` and
``txt`` the bytes as they are (an encoded image, bytes, UTF-8 text), ``cls`` an integer
as decimal text, ``npy`` an array as ``.npy`` (checked against the field when read),
``json`` a list of strings as JSON (``json-base64``: byte strings as base64), ``png``
and the lossy image formats pixels."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from ...bounded_json import load_json
from ...errors import CodecIOError, UnsupportedDtypeError
from ...images.imagecodec import LOSSY_FORMATS, LossyImage, is_image_like
from ...images.pixels import decode_pixels
from ...model import Image, Ragged, String, StringList, Tensor
from ...model.schema import FieldSpec
from .npy import npy_bytes, read_npy

__all__ = [
    "ENCODINGS",
    "choose_record_encoding",
    "decode_record",
    "encode_record",
    "json_string_list",
]

ENCODINGS = ("encoded", "bin", "txt", "cls", "npy", "json", "json-base64", "png", *LOSSY_FORMATS)
_AS_IS = ("encoded", "bin", "txt")
_JSON = ("json", "json-base64")


def choose_record_encoding(
    spec: FieldSpec, lossy: LossyImage | None, codec: str
) -> tuple[str, int | None]:
    """The encoding of ``spec``'s records and its quality: pixels (raw images, image-like
    tensors) as PNG or ``lossy`` (refused by name when they cannot be), encoded images
    as they are, integer scalars ``cls``, other arrays ``npy``."""
    kind = spec.kind
    if isinstance(kind, Image) and kind.encoding != "raw":
        return "encoded", None
    if isinstance(kind, Image) or (isinstance(kind, Tensor) and is_image_like(spec)):
        if lossy is None:
            return "png", None
        try:
            lossy.check_field(spec, codec, images_option=False)
        except UnsupportedDtypeError as e:  # it names zarr's lossless setting; ours is png
            raise UnsupportedDtypeError(str(e).replace("codec=none", "codec=png")) from None
        return lossy.format, lossy.quality
    if isinstance(kind, Tensor) and kind.shape == () and kind.dtype.kind in "iu":
        return "cls", None
    if isinstance(kind, (Tensor, Ragged)):
        return "npy", None
    if isinstance(kind, StringList):
        return ("json" if kind.text else "json-base64"), None
    return ("txt" if isinstance(kind, String) else "bin"), None


def encode_record(
    encoding: str, spec: FieldSpec, value: Any, lossy: LossyImage | None, png: Any
) -> bytes:
    """One record (an ndarray, str, bytes or list) as ``encoding``; pixels as ``lossy``
    or as PNG by the encoder ``png``."""
    if encoding in _AS_IS:
        return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if encoding == "json":  # valid UTF-8: checked when read
        text = [s.decode("utf-8") for s in value]
        return json.dumps(text, ensure_ascii=False, separators=(",", ":")).encode()
    if encoding == "json-base64":
        return json.dumps([base64.b64encode(bytes(b)).decode() for b in value]).encode()
    if encoding == "cls":
        return str(int(value)).encode()
    if encoding == "npy":
        # astype: indexing a 1-d array gives a native-endian scalar; keep the field's byte order
        return npy_bytes(np.asarray(value).astype(spec.dtype))
    img = np.asarray(value)
    if lossy is not None:
        return lossy.encode(img)
    return bytes(png(np.ascontiguousarray(img, dtype=img.dtype.newbyteorder("="))))


def json_string_list(data: bytes, where: str) -> list[str] | None:
    """The JSON list of strings ``data`` holds; None when it holds other JSON. Text that
    is not JSON, or not within :mod:`dstore.bounded_json`'s limits, is a
    :class:`~dstore.bounded_json.JsonLimitError` naming ``where``."""
    value = load_json(data, where, "JSON")
    ok = isinstance(value, list) and all(isinstance(s, str) for s in value)
    return value if ok else None


def decode_record(
    encoding: str,
    spec: FieldSpec,
    data: bytes,
    lossy: LossyImage | None,
    where: str,
    out: np.ndarray | None = None,
) -> Any:
    """One record from its bytes (the bytes themselves for :data:`_AS_IS`), checked
    against ``spec``: anything else is one line naming ``where``. A PNG that holds
    exactly ``out`` (the record's row of a dense column) is decoded there."""
    if encoding in _AS_IS:
        return data
    if encoding in _JSON:
        strings = json_string_list(data, where)
        if strings is None:
            raise CodecIOError(f"{where}: not a JSON list of strings")
        try:
            if encoding == "json":
                "".join(strings).encode("utf-8")  # JSON's "\ud800" is no UTF-8 text
                return strings
            return [base64.b64decode(s, validate=True) for s in strings]
        except UnicodeEncodeError:
            raise CodecIOError(f"{where}: a string holds a lone surrogate (not text)") from None
        except ValueError:
            raise CodecIOError(f"{where}: a string is not base64") from None
    if encoding == "cls":
        try:
            return np.asarray(int(data), spec.dtype)
        except (ValueError, OverflowError):
            raise CodecIOError(f"{where}: not a {spec.dtype} integer: {data[:40]!r}") from None
    if encoding == "npy":
        arr = read_npy(data, where)
        # ragged: rows of the inner shape; a 0-d array is one value (foreign tars' fields
        # that some samples lack: model/samples.py list_kind)
        want = spec.shape if isinstance(spec.kind, Tensor) else None
        fits = arr.shape == want if want is not None else arr.shape[1:] == spec.shape
        if arr.dtype != spec.dtype or not fits:
            shown = spec.kind.describe()
            raise CodecIOError(f"{where}: .npy holds {arr.dtype} {arr.shape}, field is {shown}")
        return arr
    return decode_pixels(data, spec, lossy, where, out)
