"""Field kinds: what one record of a field is, independent of any storage format.

Every field of a split has exactly one kind (TFDS has one ``FeatureConnector``
per kind; Arrow has list/string/binary types). A kind says

* what a record is (``record(column, i)``: an ndarray, a ``str`` or ``bytes``),
* how a batch of records is held in memory (:func:`column_type`): fixed-shape
  kinds as one ndarray with a record axis, variable-size kinds as a
  :class:`~dstore.model.columns.VarColumn` -- values plus row offsets, never a
  Python object per record on the hot path,
* and how it is written in a schema (``to_json`` / :func:`kind_from_json`), so
  that every format carries the same description and a round trip restores it.

Codecs decide how they *store* each kind; this module knows no format.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import SchemaError, UnsupportedDtypeError

__all__ = [
    "IMAGE_ENCODINGS",
    "Bytes",
    "Image",
    "Kind",
    "Ragged",
    "String",
    "StringList",
    "Tensor",
    "check_numeric_dtype",
    "kind_from_json",
]

_UINT8 = np.dtype(np.uint8)
#: Encodings an Image field may hold; "raw" is pixels, the others encoded bytes.
IMAGE_ENCODINGS = ("raw", "png", "jpeg", "webp", "jxl", "avif", "gif", "bmp", "tiff")


def check_numeric_dtype(dtype: Any, where: str) -> np.dtype:
    """The numeric dtypes a Tensor or Ragged field may have (numbers and bool).

    Objects would need pickle; structured dtypes and long doubles have no
    portable form in the formats dstore writes."""
    try:
        dt: np.dtype = np.dtype(dtype)
    except TypeError as e:
        raise SchemaError(f"{where}: {dtype!r} is not a dtype") from e
    if dt.hasobject:
        raise UnsupportedDtypeError(
            f"{where}: object arrays are refused (they can only be stored by pickling)"
        )
    if dt.fields is not None or dt.subdtype is not None:
        raise UnsupportedDtypeError(f"{where}: structured dtype {dt} is not supported")
    # ml_dtypes' bfloat16 (numpy kind "V"): what dstore reads back from bfloat16 storage
    if dt.kind not in "biufc" and dt.name != "bfloat16":
        raise UnsupportedDtypeError(f"{where}: dtype {dt} is not supported (numbers and bool only)")
    if (dt.kind == "f" and dt.itemsize > 8) or (dt.kind == "c" and dt.itemsize > 16):
        raise UnsupportedDtypeError(
            f"{where}: {dt} (long double) has no portable storage; cast it to float64 first"
        )
    return dt


def _shape(value: Any, where: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(n) for n in value)
    except (TypeError, ValueError) as e:
        raise SchemaError(f"{where}: bad shape {value!r}") from e
    if any(n < 0 for n in shape):
        raise SchemaError(f"{where}: negative dimension in {shape}")
    return shape


class Kind(ABC):
    """What one record of a field is. Subclasses are frozen dataclasses."""

    #: the name in schema JSON ("kind": ...)
    tag: ClassVar[str]
    #: True when every record has the same number of bytes in memory
    fixed: ClassVar[bool] = False

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """JSON-able description, ``{"kind": tag, ...}``; :func:`kind_from_json` inverts it."""

    @abstractmethod
    def describe(self) -> str:
        """A short human name, e.g. ``uint8 (256, 256, 3)`` or ``ragged float32 (*, 4)``."""

    @property
    def value_dtype(self) -> np.dtype:
        """The dtype of the values a column of this kind holds."""
        return np.dtype(np.uint8)

    def record_bytes(self) -> int | None:
        """Bytes of one record in memory, or None when records vary."""
        return None

    def decoded_record_bytes(self) -> int | None:
        """Bytes of one record's values once decoded (an encoded image's pixels, not its
        PNG bytes), or None when records vary: what a dataset's "raw" size counts."""
        return self.record_bytes()


@dataclass(frozen=True)
class Tensor(Kind):
    """A fixed-shape numeric record: tiles, one-hot labels, feature vectors."""

    dtype: np.dtype
    shape: tuple[int, ...] = ()

    tag: ClassVar[str] = "tensor"
    fixed: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", check_numeric_dtype(self.dtype, "tensor"))
        object.__setattr__(self, "shape", _shape(self.shape, "tensor"))

    @property
    def value_dtype(self) -> np.dtype:
        return self.dtype

    def record_bytes(self) -> int:
        return int(math.prod(self.shape)) * self.dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.tag, "dtype": self.dtype.str, "shape": list(self.shape)}

    def describe(self) -> str:
        return f"{_dtype_name(self.dtype)} {self.shape}"


@dataclass(frozen=True)
class String(Kind):
    """UTF-8 text per record (file names, class names, captions); a record is a ``str``."""

    tag: ClassVar[str] = "string"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.tag}

    def describe(self) -> str:
        return "string"


@dataclass(frozen=True)
class Bytes(Kind):
    """Opaque bytes per record; a record is ``bytes``."""

    tag: ClassVar[str] = "bytes"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.tag}

    def describe(self) -> str:
        return "bytes"


@dataclass(frozen=True)
class StringList(Kind):
    """A list of strings per record (``text``) or of byte strings: the class names of
    every box of an image, a record's tags. A record is ``list[str]`` / ``list[bytes]``.

    A column nests two value + offset pairs, as Arrow's ``list<string>`` does: a
    :class:`~dstore.model.columns.VarColumn` of all records' strings (UTF-8 /
    raw bytes plus one offset per string) inside record offsets into those
    strings."""

    text: bool = True

    tag: ClassVar[str] = "string_list"

    def __post_init__(self) -> None:
        if not isinstance(self.text, bool):
            raise SchemaError(f"string_list: text must be true or false. Got {self.text!r}.")

    @property
    def item(self) -> Kind:
        """The kind of one element of a record's list."""
        return String() if self.text else Bytes()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.tag, "text": self.text}

    def describe(self) -> str:
        return f"list of {'string' if self.text else 'bytes'}"


@dataclass(frozen=True)
class Ragged(Kind):
    """A variable first axis per record: boxes ``(n_i, 4)``, token lists ``(n_i,)``."""

    dtype: np.dtype
    inner_shape: tuple[int, ...] = ()

    tag: ClassVar[str] = "ragged"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", check_numeric_dtype(self.dtype, "ragged"))
        object.__setattr__(self, "inner_shape", _shape(self.inner_shape, "ragged"))

    @property
    def value_dtype(self) -> np.dtype:
        return self.dtype

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.tag, "dtype": self.dtype.str, "inner_shape": list(self.inner_shape)}

    def describe(self) -> str:
        return f"ragged {_dtype_name(self.dtype)} {('*', *self.inner_shape)}".replace("'", "")


@dataclass(frozen=True)
class Image(Kind):
    """Pixels of a fixed or variable size, raw or encoded (PNG, JPEG, ...).

    ``height``/``width`` are None when they vary between records, ``channels``
    None when unknown (an encoded image from a foreign file before decoding).
    A raw image of fixed size is held like a Tensor ``(H, W, C)`` (``(H, W)``
    when ``channels`` is 0: a 2-d greyscale record); anything else is one byte
    string per record (encoded) or pixels plus per-record shapes (raw, varying).
    """

    dtype: np.dtype = _UINT8
    channels: int | None = 3
    height: int | None = None
    width: int | None = None
    encoding: str = "raw"

    tag: ClassVar[str] = "image"

    def __post_init__(self) -> None:
        dt = np.dtype(self.dtype)
        if dt.kind != "u" or dt.itemsize not in (1, 2):
            raise UnsupportedDtypeError(f"image: pixels must be uint8 or uint16. Got {dt} instead.")
        object.__setattr__(self, "dtype", dt)
        if self.encoding not in IMAGE_ENCODINGS:
            raise SchemaError(
                f"image: encoding must be one of {', '.join(IMAGE_ENCODINGS)}. Got {self.encoding!r} instead."
            )
        if self.channels is not None and self.channels not in (0, 1, 2, 3, 4):
            raise SchemaError(
                f"image: channels must be 0 (2-d), 1, 2, 3 or 4. Got {self.channels} instead."
            )
        for name in ("height", "width"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 0):
                raise SchemaError(
                    f"image: {name} must be a non-negative int or None. Got {v!r} instead."
                )

    @property
    def fixed_size(self) -> bool:
        return self.height is not None and self.width is not None and self.channels is not None

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The record shape of a raw fixed-size image, else None."""
        if not self.fixed_size:
            return None
        assert self.height is not None and self.width is not None  # for mypy: fixed_size says so
        return (
            (self.height, self.width)
            if self.channels == 0
            else (self.height, self.width, self.channels or 0)
        )

    @property
    def is_dense(self) -> bool:
        """True when a batch column is one ndarray (raw pixels of one fixed size)."""
        return self.encoding == "raw" and self.fixed_size

    @property
    def value_dtype(self) -> np.dtype:
        return self.dtype if self.encoding == "raw" else np.dtype(np.uint8)

    def record_bytes(self) -> int | None:
        shape = self.shape
        if self.encoding != "raw" or shape is None:
            return None
        return int(math.prod(shape)) * self.dtype.itemsize

    def decoded_record_bytes(self) -> int | None:
        # width x height x channels x itemsize whatever the encoding: PNG bytes in memory
        # say nothing of the pixels they hold
        shape = self.shape
        return None if shape is None else int(math.prod(shape)) * self.dtype.itemsize

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.tag,
            "dtype": self.dtype.str,
            "channels": self.channels,
            "height": self.height,
            "width": self.width,
            "encoding": self.encoding,
        }

    def describe(self) -> str:
        h = "*" if self.height is None else self.height
        w = "*" if self.width is None else self.width
        c = "?" if self.channels is None else self.channels
        size = f"({h}, {w})" if c == 0 else f"({h}, {w}, {c})"
        return f"image {_dtype_name(self.dtype)} {size} {self.encoding}"


_KINDS: dict[str, type[Kind]] = {
    k.tag: k for k in (Tensor, String, Bytes, StringList, Ragged, Image)
}


def kind_from_json(data: Mapping[str, Any], where: str = "field") -> Kind:
    """The kind a schema entry describes; entries without ``kind`` are Tensors
    (files written before kinds existed)."""
    if not isinstance(data, Mapping):
        raise SchemaError(f"{where}: bad schema entry {data!r}")
    tag = data.get("kind", "tensor")
    cls = _KINDS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise SchemaError(f"{where}: unknown field kind {tag!r}; known: {', '.join(_KINDS)}")
    try:
        if cls is Tensor:
            return Tensor(np.dtype(data["dtype"]), data.get("shape", ()))
        if cls is Ragged:
            return Ragged(np.dtype(data["dtype"]), data.get("inner_shape", ()))
        if cls is StringList:
            return StringList(data.get("text", True))
        if cls is Image:
            return Image(
                np.dtype(data.get("dtype", "|u1")),
                data.get("channels"),
                data.get("height"),
                data.get("width"),
                data.get("encoding", "raw"),
            )
        return cls()
    except (KeyError, TypeError) as e:
        raise SchemaError(f"{where}: bad schema entry {dict(data)!r}: {e}") from None
    except SchemaError as e:
        raise SchemaError(f"{where}: {e}") from None


def _dtype_name(dtype: np.dtype) -> str:
    """``uint8``/``float32``; byte order shown only when it is not native."""
    if dtype.byteorder == ">" or (dtype.byteorder == "<" and np.little_endian is False):
        return f"{dtype.newbyteorder('=').name} (big-endian)"
    return dtype.name
