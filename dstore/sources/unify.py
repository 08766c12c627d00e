"""One field from many files: kinds that agree up to what they can be widened to (image
sizes that vary, fixed pixels beside encoded ones), each file's column coerced to the
unified kind, and the attributes that vary between files kept per file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import bounded_json
from ..images.decoding import decode_column_images
from ..images.imagecodec import is_image_like, record_channels
from ..model import Column, Image, Kind, Ragged, Tensor, VarColumn
from ..model.attrs import ATTRS_KEY
from ..model.checksums import CHECKSUM_ATTR
from ..model.schema import FieldSpec

__all__ = ["SOURCES_ATTR", "SOURCE_FIELD", "flat_attrs", "unflatten_attrs"]

#: The string field naming each record's file.
SOURCE_FIELD = "source"
#: Schema attribute: the files in order, their record counts and the attributes that vary.
SOURCES_ATTR = "dstore.sources"


def _unify(a: Kind, b: Kind) -> Kind | None:
    """One kind holding both files' records (int vs float, lengths that vary between
    files, images whose size varies), or None when they disagree."""
    if a == b:
        return a
    image = _unify_images(a, b)
    if image is not None:
        return image
    num = "iuf"
    if isinstance(a, (Tensor, Ragged)) and isinstance(b, (Tensor, Ragged)):
        if a.dtype.kind not in num or b.dtype.kind not in num:
            return None
        dtype = np.result_type(a.dtype, b.dtype)
        if isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape:
            return Tensor(dtype, a.shape)
        inner_a = a.shape[1:] if isinstance(a, Tensor) else a.inner_shape
        inner_b = b.shape[1:] if isinstance(b, Tensor) else b.inner_shape
        tensors_ok = all(len(k.shape) >= 1 for k in (a, b) if isinstance(k, Tensor))
        if inner_a == inner_b and tensors_ok:
            return Ragged(dtype, inner_a)
    return None


def _as_image(kind: Kind, other: Kind) -> Image | None:
    """``kind`` as an Image when it is one: an Image, or a tensor the file's reader holds
    as pixels (:func:`is_image_like`, what TFRecord stores as PNG; a TFRecord of PNGs of one
    size reads as one) -- or shaped like the pixels of ``other``, an Image (a file of
    grey+alpha PNGs of one size beside one whose sizes vary)."""
    if isinstance(kind, Image):
        return kind
    if not isinstance(kind, Tensor):
        return None
    channels = record_channels(kind.shape)
    like_other = isinstance(other, Image) and channels is not None and channels == other.channels
    if channels is None or not (is_image_like(FieldSpec("", kind)) or like_other):
        return None
    if kind.dtype.kind != "u" or kind.dtype.itemsize not in (1, 2) or min(kind.shape[:2]) == 0:
        return None
    return Image(kind.dtype, channels, kind.shape[0], kind.shape[1], "raw")


def _unify_images(a: Kind, b: Kind) -> Image | None:
    """Images of one dtype and channel count whose size differs between files: an Image of
    varying size. Raw pixels beside encoded images are pixels (the encoded ones decoded):
    a file of PNGs of one size reads as a tensor of pixels already (its bytes are gone)."""
    ia, ib = _as_image(a, b), _as_image(b, a)
    if ia is None or ib is None or ia.dtype != ib.dtype or ia.channels != ib.channels:
        return None
    if ia.channels is None:
        return None  # channels that vary inside a file: nothing to check pixels against
    if ia.encoding != ib.encoding and "raw" not in (ia.encoding, ib.encoding):
        return None  # PNG beside JPEG: not asked for; each file's own kind is kept apart
    encoding = ia.encoding if ia.encoding == ib.encoding else "raw"
    if (ia.height, ia.width) == (ib.height, ib.width):
        return Image(ia.dtype, ia.channels, ia.height, ia.width, encoding)
    # a size that varies, as a file whose PNG sizes vary is read (height and width unknown)
    return Image(ia.dtype, ia.channels, None, None, encoding)


def _coerce(col: Column, have: Kind, want: Kind, where: str = "", first: int = 0) -> Column:
    """A file's column as the unified kind wants it; ``where`` and ``first`` (the batch's
    first record in the file) name a record whose image does not decode."""
    if have == want:
        return col
    if isinstance(want, Image):
        return _coerce_image(col, have, want, where, first)
    if isinstance(want, Tensor):
        return np.asarray(col).astype(want.dtype)
    assert isinstance(want, Ragged)
    if isinstance(col, VarColumn):
        return VarColumn(col.flat_values.astype(want.dtype), col.offsets)
    arr = np.asarray(col)
    width = arr.shape[1] if arr.ndim > 1 else 0
    offsets = np.arange(len(arr) + 1, dtype=np.int64) * width
    return VarColumn(arr.reshape((-1, *want.inner_shape)).astype(want.dtype), offsets)


def _coerce_image(col: Column, have: Kind, want: Image, where: str, first: int) -> Column:
    if isinstance(have, Image) and have.encoding != want.encoding:
        assert isinstance(col, VarColumn) and want.encoding == "raw"
        # --keep-encoded cannot help here: other files hold this field as pixels
        hint = "other files hold this field as pixels, so it is decoded: convert the file alone"
        pixels = decode_column_images(col, have, where, first, hint)
        if want.is_dense:  # encoded images of the one size the other files' pixels have
            return pixels.flat_values.reshape((len(pixels), *(want.shape or ())))
        return pixels
    if isinstance(col, VarColumn) or want.is_dense:
        return col  # encoded as wanted, or pixels of varying size already
    # pixels of one size: each record's flattened pixels and its shape
    arr = np.asarray(col)
    size = int(np.prod(arr.shape[1:], dtype=np.int64))
    offsets = np.arange(len(arr) + 1, dtype=np.int64) * size
    shapes = np.tile(np.array(arr.shape[1:], np.int64), (len(arr), 1))
    return VarColumn(arr.reshape(-1), offsets, shapes)


def flat_attrs(attrs: Mapping[str, Any]) -> dict[str, str]:
    """Attributes as flat key -> JSON text, so files can be compared key by key."""
    out = {}
    for key, value in attrs.items():
        if key in (CHECKSUM_ATTR, SOURCES_ATTR):
            continue
        if key == ATTRS_KEY and isinstance(value, Mapping):
            for name, enc in (value.get("root") or {}).items():
                out[f"{ATTRS_KEY}/root/{name}"] = json.dumps(enc, sort_keys=True)
            for split, held in (value.get("splits") or {}).items():
                for name, enc in held.items():
                    out[f"{ATTRS_KEY}/splits/{split}/{name}"] = json.dumps(enc, sort_keys=True)
            continue
        out[key] = json.dumps(value, sort_keys=True)
    return out


def unflatten_attrs(flat: Mapping[str, str]) -> dict[str, Any]:
    """The inverse of the flattening the schema's per-source attributes use."""
    out: dict[str, Any] = {}
    for key, text in flat.items():
        value = bounded_json.load_json(text, f"attribute {key!r}")
        if key.startswith(ATTRS_KEY + "/root/"):
            held = out.setdefault(ATTRS_KEY, {})
            held.setdefault("root", {})[key[len(ATTRS_KEY) + 6 :]] = value
        elif key.startswith(ATTRS_KEY + "/splits/"):
            split, _, name = key[len(ATTRS_KEY) + 8 :].rpartition("/")
            held = out.setdefault(ATTRS_KEY, {})
            held.setdefault("splits", {}).setdefault(split, {})[name] = value
        else:
            out[key] = value
    return out
