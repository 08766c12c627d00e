"""Class labels: an integer scalar field whose values index a list of class names
(a Hugging Face or TFDS ``ClassLabel``; -1 is "no label", as ``datasets`` has it), or a
one-hot field of one value per class name (label-maker's), stored as the index of its 1;
and which fields are labels by their name (``dstore bench``'s probe and ``dstore
check`` both ask :func:`is_label_name`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import CodecIOError, SchemaError
from .kinds import Image
from .schema import FieldSpec, Schema

__all__ = [
    "LABEL_NAMES",
    "LABEL_PREFIXES",
    "check_labels",
    "from_one_hot",
    "is_label_name",
    "is_one_hot",
    "label_field",
    "to_one_hot",
]

#: names of label fields: ``y`` of label-maker, ``labels`` of CoralNet's features...
LABEL_NAMES = ("labels", "label", "y", "target", "targets", "class", "classes")
#: what the training layouts (:mod:`dstore.layouts.tiles`) annotate an image with: boxes,
#: class ids and texts (``image/object/...``), class masks (``image/segmentation/...``)
LABEL_PREFIXES = ("image/object/", "image/segmentation/")


def is_label_name(name: str) -> bool:
    """True for a field that labels records rather than holding their data."""
    return name in LABEL_NAMES or name.startswith(LABEL_PREFIXES)


def _is_label(spec: FieldSpec) -> bool:
    return (
        spec.dense
        and spec.shape == ()
        and spec.dtype.kind in "iu"
        and not isinstance(spec.kind, Image)
    )


def is_one_hot(spec: FieldSpec, classes: int) -> bool:
    """A field whose records can be one-hot rows of ``classes`` values (numbers or bools)."""
    return (
        spec.dense
        and spec.shape == (classes,)
        and spec.dtype.kind in "biuf"
        and not isinstance(spec.kind, Image)
    )


def label_field(schema: Schema, named: str | None, codec: str, classes: int = 0) -> str:
    """The field ``classes`` class names describe: ``named``, else the only integer scalar
    or one-hot field of ``classes`` values; either must be such a field where a split has it."""
    fields = [(s, f) for s in schema.splits.values() for f in s.fields.values()]
    found = {f.name for _, f in fields if _is_label(f) or is_one_hot(f, classes)}
    if named is None and len(found) != 1:
        # a one-hot field of another width: the names are what is wrong, not the field
        widths = {
            f.name: f.shape[0] for _, f in fields if len(f.shape) == 1 and is_one_hot(f, f.shape[0])
        }
        advice = (
            "name it with -o label_field=..."
            if found
            else "; ".join(
                f"{n!r} has {w} values: give {w} class_names" for n, w in sorted(widths.items())
            )
        )
        raise CodecIOError(
            f"{codec}: class_names needs one integer scalar label field or one one-hot field "
            f"of {classes} values; found {sorted(found) or 'none'}: {advice or 'none to name'}"
        )
    name = named if named is not None else found.pop()
    for split, spec in fields:
        if spec.name == name and not (_is_label(spec) or is_one_hot(spec, classes)):
            raise SchemaError(
                f"{codec}: split {split.name!r}, field {name!r}: class_names needs an "
                f"integer scalar field or a one-hot field of {classes} values (one per name), "
                f"not {spec.kind.describe()}"
            )
    return name


def check_labels(labels: np.ndarray, names: Sequence[str], where: str) -> None:
    """Refuse a label that names no class (-1, no label, is one)."""
    bad = np.flatnonzero((labels < -1) | (labels >= len(names)))
    if len(bad):
        raise CodecIOError(
            f"{where}: label {labels[bad[0]]} is not a class "
            f"(-1 or 0..{len(names) - 1} for {len(names)} class_names)"
        )


def from_one_hot(rows: np.ndarray, where: str, first: int = 0) -> np.ndarray:
    """The class (int64) of each one-hot row of ``rows``, records ``first...``. A row that
    is not one 1 among 0s, bit for bit (multi-hot, soft, all zero, -0.0), is refused
    naming its record: the class index could not give it back."""
    rows = np.ascontiguousarray(rows)
    ids = np.argmax(rows, axis=1).astype(np.int64)
    same = np.eye(rows.shape[1], dtype=rows.dtype)[ids]
    bytes_per_row = rows.dtype.itemsize * rows.shape[1]
    differs = (same.view(np.uint8) != rows.view(np.uint8)).reshape(len(rows), bytes_per_row)
    bad = np.flatnonzero(differs.any(axis=1))
    if len(bad):
        row = rows[bad[0]]
        raise SchemaError(
            f"{where}, record {first + int(bad[0])}: not one-hot ({int(np.count_nonzero(row))} "
            f"of {len(row)} values set, {row.tolist()[:8]}): class_names takes one class per "
            "record"
        )
    return ids


def to_one_hot(
    ids: np.ndarray, classes: int, dtype: np.dtype, where: str, first: int = 0
) -> np.ndarray:
    """One-hot rows of ``classes`` values of ``dtype`` for the class indexes ``ids`` of
    records ``first...``; an index that names no class is refused naming its record."""
    bad = np.flatnonzero((ids < 0) | (ids >= classes))
    if len(bad):
        raise CodecIOError(
            f"{where}, record {first + int(bad[0])}: class {int(ids[bad[0]])} of a one-hot "
            f"field of {classes} classes"
        )
    return np.eye(classes, dtype=dtype)[ids]
