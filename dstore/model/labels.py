"""Class labels: an integer scalar field whose values index a list of class names
(a Hugging Face or TFDS ``ClassLabel``; -1 is "no label", as ``datasets`` has it);
and which fields are labels by their name (``dstore bench``'s probe and ``dstore
check`` both ask :func:`is_label_name`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import CodecIOError, SchemaError
from .kinds import Image
from .schema import FieldSpec, Schema

__all__ = ["LABEL_NAMES", "LABEL_PREFIXES", "check_labels", "is_label_name", "label_field"]

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


def label_field(schema: Schema, named: str | None, codec: str) -> str:
    """The field class names describe: ``named``, else the only integer scalar field;
    either must be an integer scalar where a split has it."""
    found = {n for s in schema.splits.values() for n, f in s.fields.items() if _is_label(f)}
    if named is None and len(found) != 1:
        raise CodecIOError(
            f"{codec}: class_names needs one integer scalar label field; "
            f"found {sorted(found) or 'none'}: name it with -o label_field=..."
        )
    name = named if named is not None else found.pop()
    for split in schema.splits.values():
        if name in split.fields and not _is_label(spec := split.fields[name]):
            raise SchemaError(
                f"{codec}: split {split.name!r}, field {name!r}: class_names needs an "
                f"integer scalar field, not {spec.kind.describe()}"
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
