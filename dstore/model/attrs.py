"""User attributes and fill values, carried in dstore's schema between formats.

HDF5 and zarr attach attributes to files, groups and arrays, and give arrays a
fill value; npz and TFRecord have neither. dstore reads them into the schema,
restores them where the target can hold them, and keeps them in its own schema
(the npz zip comment, the TFRecord manifest) where it cannot, so a later
conversion back restores them. Where they land:

* ``FieldSpec.attrs``: ``{"user": {name: value}, "fill_value": value}`` (both optional);
* ``Schema.attrs[ATTRS_KEY]``: ``{"root": {name: value}, "splits": {split: {name: value}}}``.

Each value is JSON with exactly one key saying how to rebuild it, so nothing is
guessed back from JSON's few types:

* ``{"json": v}``: a JSON value as zarr holds it (str, int, finite float, bool,
  None, lists and objects of these);
* ``{"array": {"dtype": "<f4", "shape": [2], "b64": "..."}}``: a numpy scalar
  (shape ``[]``) or array of numbers, bools or fixed-width bytes, bit for bit;
* ``{"bytes": "<base64>"}``: Python bytes;
* ``{"strings": [...], "shape": [...]}``: an array of text (h5py's variable-length strings).

Anything else (HDF5 references, compound or empty attributes) cannot be carried:
readers name it in a note instead of dropping it silently.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

__all__ = [
    "ATTRS_KEY",
    "Unrepresentable",
    "decode",
    "encode",
    "encode_all",
    "fill_value",
    "for_hdf5",
    "for_zarr",
    "group_attrs",
    "is_missing",
    "iter_user_attrs",
    "schema_only_notes",
    "target_notes",
    "with_groups",
]

#: Key of ``Schema.attrs`` holding root and split attributes.
ATTRS_KEY = "dstore.attrs"


class Unrepresentable(ValueError):
    """An attribute value dstore cannot encode (the reader notes it by name)."""


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def encode(value: Any) -> dict[str, Any]:
    """The schema form of an attribute value (raises :class:`Unrepresentable`)."""
    if isinstance(value, (bytes, bytearray)) and not isinstance(value, np.bytes_):
        return {"bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, np.void) and value.dtype.fields is None:  # HDF5's opaque type
        return {"bytes": base64.b64encode(value.tobytes()).decode()}
    if isinstance(value, (np.generic, np.ndarray)):
        arr = np.asarray(value)
        if arr.dtype.kind in "biufcS" and arr.dtype.fields is None:
            native = arr.astype(arr.dtype.newbyteorder("=") if arr.dtype.kind != "S" else arr.dtype)
            return {
                "array": {
                    "dtype": arr.dtype.str,
                    "shape": list(arr.shape),
                    "b64": base64.b64encode(np.ascontiguousarray(native).tobytes()).decode(),
                }
            }
        if arr.dtype.kind in "OU" and all(isinstance(v, str) for v in arr.reshape(-1)):
            return {"strings": [str(v) for v in arr.reshape(-1)], "shape": list(arr.shape)}
        raise Unrepresentable(f"{arr.dtype} values")
    if isinstance(value, float) and not math.isfinite(value):
        return encode(np.float64(value))
    if _is_json(value):
        return {"json": value}
    raise Unrepresentable(f"a {type(value).__name__}")


def decode(enc: Mapping[str, Any]) -> Any:
    """The value :func:`encode` was given (numpy scalars come back as numpy scalars)."""
    if "json" in enc:
        return enc["json"]
    if "bytes" in enc:
        return base64.b64decode(enc["bytes"])
    if "strings" in enc:
        return np.array(enc["strings"], dtype=object).reshape(enc["shape"])
    if "array" in enc:
        spec = enc["array"]
        dtype = np.dtype(spec["dtype"])
        native = dtype.newbyteorder("=") if dtype.kind != "S" else dtype
        arr = (
            np.frombuffer(base64.b64decode(spec["b64"]), native)
            .reshape(spec["shape"])
            .astype(dtype)
        )
        return arr[()] if arr.ndim == 0 else arr
    raise ValueError(f"unknown attribute encoding {sorted(enc)}")


def for_hdf5(enc: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The value to give h5py, and a note when HDF5 holds it in another form."""
    if "json" in enc:
        value = enc["json"]
        if (
            (isinstance(value, str) and "\x00" not in value)
            or isinstance(value, (bool, float))
            or (
                isinstance(value, int) and -(2**63) <= value < 2**64  # HDF5 integers are 64-bit
            )
        ):
            return value, None
        # HDF5 has no lists of mixed type, objects, null, text with NUL or integers past
        # 64 bits: a JSON string stands in
        return json.dumps(value), "stored as a JSON string"
    if "bytes" in enc:
        return np.void(decode(enc)), None  # HDF5's opaque type
    if "strings" in enc:
        return decode(enc).tolist(), None  # a str, or lists of str: h5py's variable-length strings
    return decode(enc), None


_MISSING = object()


def for_zarr(enc: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The JSON value to give zarr (``_MISSING`` if none), and a note when it differs."""
    if "json" in enc:
        return enc["json"], None
    if "strings" in enc:
        return decode(enc).tolist(), None
    if "bytes" in enc:
        return _MISSING, "bytes: not a JSON value"
    value = decode(enc)
    arr = np.asarray(value)
    if arr.dtype.kind == "S" or (arr.dtype.kind in "fc" and not np.isfinite(arr).all()):
        return _MISSING, f"{arr.dtype} value(s) JSON cannot hold"
    plain = arr.tolist()
    if arr.dtype.kind == "c":
        return _MISSING, f"{arr.dtype}: complex is not a JSON value"
    return plain, f"{arr.dtype.name} {'scalar' if arr.ndim == 0 else 'array'} stored as JSON"


def is_missing(value: Any) -> bool:
    return value is _MISSING


def encode_all(
    attrs: Mapping[str, Any], where: str, skip: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[str]]:
    """Encode a mapping of attributes: (encoded, notes naming the ones that cannot be carried)."""
    out: dict[str, Any] = {}
    notes = []
    for name in attrs:
        if name in skip:
            continue
        try:
            out[str(name)] = encode(attrs[name])
        except (Unrepresentable, OSError, TypeError, ValueError) as e:
            notes.append(f"{where}: attribute {name!r} ({e}) is not carried")
    return out, notes


def group_attrs(
    schema_attrs: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(root attributes, split -> attributes) from ``Schema.attrs``."""
    held = schema_attrs.get(ATTRS_KEY) or {}
    return dict(held.get("root", {})), {k: dict(v) for k, v in held.get("splits", {}).items()}


def with_groups(
    schema_attrs: Mapping[str, Any],
    root: Mapping[str, Any],
    splits: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """``schema_attrs`` plus root and split attributes (left out when there are none)."""
    out = dict(schema_attrs)
    splits = {k: dict(v) for k, v in splits.items() if v}
    if root or splits:
        out[ATTRS_KEY] = {"root": dict(root), "splits": splits}
    return out


def fill_value(field_attrs: Mapping[str, Any], dtype: np.dtype) -> Any:
    """The field's fill value as a scalar of ``dtype`` (a cast field's fill value is cast
    too), or None when it has none."""
    enc = field_attrs.get("fill_value")
    if enc is None:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(decode(enc)).astype(dtype)[()]


def iter_user_attrs(schema: Any) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(where, name, encoded value) of every user attribute in a schema."""
    root, splits = group_attrs(schema.attrs)
    for name, enc in root.items():
        yield "the root", name, enc
    for split, held in splits.items():
        for name, enc in held.items():
            yield f"split {split!r}", name, enc
    for split in schema.splits.values():
        for spec in split.fields.values():
            for name, enc in spec.attrs.get("user", {}).items():
                yield f"{split.name}/{spec.name}", name, enc


def target_notes(schema: Any, fmt: str, convert: Any) -> list[str]:
    """Summary notes for a format that holds attributes: which ones it holds in another
    form or not at all (``convert`` is :func:`for_hdf5` or :func:`for_zarr`)."""
    changed = []
    for where, name, enc in iter_user_attrs(schema):
        value, note = convert(enc)
        if note:
            state = "not stored" if is_missing(value) else "stored"
            changed.append(f"{where} {name!r} ({note}{'' if state == 'stored' else ', ' + state})")
    if not changed:
        return []
    shown = "; ".join(changed[:20]) + (
        f"; and {len(changed) - 20} more" if len(changed) > 20 else ""
    )
    note = (
        f"{fmt} holds {len(changed)} attribute(s) in another form or not at all, "
        f"their exact values are kept in dstore's schema: {shown}"
    )
    return [note]


def schema_only_notes(schema: Any, fmt: str) -> list[str]:
    """Summary note for a format without attributes or fill values (npz, TFRecord)."""
    n_attrs = sum(1 for _ in iter_user_attrs(schema))
    n_fill = sum(
        1 for s in schema.splits.values() for f in s.fields.values() if "fill_value" in f.attrs
    )
    if not n_attrs and not n_fill:
        return []
    what = " and ".join(
        x
        for x in (
            f"{n_attrs} attribute(s)" if n_attrs else "",
            f"{n_fill} fill value(s)" if n_fill else "",
        )
        if x
    )
    note = (
        f"{fmt} has no attributes or fill values: {what} are kept only in dstore's schema "
        "(restored by a conversion to HDF5 or zarr; other tools reading this file do not see them)"
    )
    return [note]
