"""Which fields ``dstore check`` hashes, and how: exact, perceptual, vector, label.

* exact: every field but the labels (names :func:`dstore.model.labels.is_label_name`
  recognises, as ``dstore bench``'s probe does, and the training layouts'
  annotations) and the ``source`` field a many-file read adds; or ``--fields``;
* image (perceptual hash): the checked fields holding images: Image fields, and
  uint8/uint16 arrays shaped ``(H, W)`` or ``(H, W, 1|3|4)`` of at least 8x8;
* vector (cosine): the checked floating fields of one axis (feature vectors);
* label: the label fields, whose values tell apart duplicates with other labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UsageError
from ..model import Image, Tensor
from ..model.labels import is_label_name
from ..model.schema import FieldSpec, Schema

__all__ = ["CheckFields", "check_fields"]

#: the fewest dimensions a floating field needs to be checked as a feature vector
MIN_VECTOR_DIMS = 8


@dataclass(frozen=True)
class CheckFields:
    """The fields of one check, by role (names in schema order)."""

    exact: tuple[str, ...]
    images: tuple[str, ...]
    vectors: tuple[str, ...]
    labels: tuple[str, ...]

    def to_json(self) -> dict[str, list[str]]:
        return {
            "exact": list(self.exact),
            "image": list(self.images),
            "vector": list(self.vectors),
            "label": list(self.labels),
        }


def is_image(spec: FieldSpec) -> bool:
    """Images a perceptual hash applies to (decoded: an encoded Image is read as pixels)."""
    if isinstance(spec.kind, Image):
        return spec.kind.channels in (None, 0, 1, 2, 3, 4)
    if not isinstance(spec.kind, Tensor) or spec.dtype.kind != "u" or spec.dtype.itemsize > 2:
        return False
    shape = spec.shape
    if len(shape) == 3 and shape[2] not in (1, 3, 4):
        return False
    return len(shape) in (2, 3) and min(shape[:2]) >= 8


def is_vector(spec: FieldSpec) -> bool:
    """Feature vectors: one axis of at least :data:`MIN_VECTOR_DIMS` floating values."""
    return (
        isinstance(spec.kind, Tensor)
        and spec.dtype.kind == "f"
        and len(spec.shape) == 1
        and spec.shape[0] >= MIN_VECTOR_DIMS
    )


def _all_fields(schema: Schema) -> dict[str, FieldSpec]:
    """Every field name of any split, with its spec in the first split that has it."""
    out: dict[str, FieldSpec] = {}
    for split in schema.splits.values():
        for name, spec in split.fields.items():
            out.setdefault(name, spec)
    return out


def _checked(
    schema: Schema,
    every: dict[str, FieldSpec],
    labels: tuple[str, ...],
    fields: Sequence[str] | None,
) -> tuple[str, ...]:
    """The fields named (each must exist), or all but the labels and a many-file read's
    ``source``."""
    if fields is None:
        from ..api import SOURCES_ATTR  # where a many-file read names the field it added

        added = schema.attrs.get(SOURCES_ATTR, {})
        source = added.get("field") if isinstance(added, dict) else None
        return tuple(n for n in every if n not in labels and n != source)
    unknown = [n for n in fields if n not in every]
    if unknown:
        raise UsageError(
            f"fields {', '.join(map(repr, unknown))} are in no split; "
            f"the fields: {', '.join(every)}"
        )
    return tuple(n for n in every if n in fields)


def check_fields(schema: Schema, fields: Sequence[str] | None = None) -> CheckFields:
    """The roles of ``schema``'s fields; ``fields`` names the checked ones (default: all
    but labels and the many-file ``source`` field). An unknown name is a UsageError."""
    every = _all_fields(schema)
    labels = tuple(n for n in every if is_label_name(n))
    exact = _checked(schema, every, labels, fields)
    labels = tuple(n for n in labels if n not in exact)
    if not exact:
        raise UsageError(
            f"no field to check (the fields: {', '.join(every)}; labels are left out): "
            "name them with fields=[...]"
        )
    # a field is an image or a vector where every split that has it says so
    kinds = {n: [s.fields[n] for s in schema.splits.values() if n in s.fields] for n in exact}
    return CheckFields(
        exact=exact,
        images=tuple(n for n in exact if all(map(is_image, kinds[n]))),
        vectors=tuple(n for n in exact if all(map(is_vector, kinds[n]))),
        labels=labels,
    )
