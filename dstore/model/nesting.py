"""A numeric column (Tensor or Ragged) as nested lists and back: its flat values and,
per list level (outermost first), the length of every list -- what Arrow's list arrays
hold, and any storage of lists of lists. A Ragged field's records are the first level,
then each fixed axis; a complex number is a trailing pair (real, imaginary); a raw image
of varying size has a level per axis (rows, pixels, channels)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CodecIOError
from .columns import Column, VarColumn
from .kinds import Image, Ragged
from .schema import FieldSpec

__all__ = ["from_levels", "image_axes", "real_dims", "to_levels"]


def image_axes(spec: FieldSpec) -> int:
    """The list levels of a record of a raw Image field of varying size (rows, pixels and,
    but for 2-d images, channels); 0 for any other field."""
    kind = spec.kind
    return 0 if spec.dense or not isinstance(kind, Image) else 2 + (kind.channels != 0)


def real_dims(spec: FieldSpec) -> tuple[np.dtype, tuple[int, ...]]:
    """The real dtype the values are stored as and the fixed axes of a record below them
    (a complex number adds a trailing axis of 2)."""
    dtype = spec.dtype.newbyteorder("=")
    if dtype.kind == "c":
        return np.dtype(f"f{dtype.itemsize // 2}"), (*spec.shape, 2)
    return dtype, spec.shape


def to_levels(spec: FieldSpec, col: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """Flat values (native byte order, of :func:`real_dims`' dtype) and each level's lengths."""
    dtype, dims = real_dims(spec)
    ragged = isinstance(col, VarColumn)
    values = np.ascontiguousarray(col.flat_values if ragged else col)
    values = values.astype(values.dtype.newbyteorder("="), copy=False).view(dtype).reshape(-1)
    if ragged and col.shapes is not None:  # raw images of varying size: a level per axis
        shapes = col.shapes
        within = [np.prod(shapes[:, :d], axis=1, dtype=np.int64) for d in range(shapes.shape[1])]
        return values, [np.repeat(shapes[:, d], n) for d, n in enumerate(within)]
    rows = len(col.flat_values) if ragged else len(col)
    levels = [col.lengths] if ragged else []
    for depth, d in enumerate(dims):
        levels.append(np.full(rows * int(np.prod(dims[:depth], dtype=np.int64)), d, np.int64))
    return values, levels


def from_levels(
    spec: FieldSpec, values: np.ndarray, levels: list[np.ndarray], where: str, first: int
) -> Column:
    """The column of records ``first...`` from flat values and each level's lengths, every
    fixed level checked against the field's axis (a mismatch names the record)."""
    if image_axes(spec):
        shapes = _image_shapes(spec, levels, where, first)
        offsets = np.concatenate([[0], np.cumsum(np.prod(shapes, axis=1))]).astype(np.int64)
        return VarColumn(np.ascontiguousarray(values).astype(spec.dtype), offsets, shapes)
    dtype, dims = real_dims(spec)
    ragged = isinstance(spec.kind, Ragged)
    for depth, lengths in enumerate(levels[ragged:]):
        if len(lengths) and (bad := np.flatnonzero(lengths != dims[depth])).size:
            at = f"record {first + int(bad[0])}" if depth + ragged == 0 else f"records from {first}"
            raise CodecIOError(
                f"{where}, {at}: {int(lengths[bad[0]])} values on axis {depth + ragged}, "
                f"the field has {dims[depth]}"
            )
    values = np.ascontiguousarray(values)
    if spec.dtype.kind == "c":
        values = values.astype(dtype, copy=False).view(spec.dtype.newbyteorder("="))
    values = values.astype(spec.dtype, copy=False)
    if not ragged:
        return values.reshape(len(levels[0]) if levels else len(values), *spec.shape)
    offsets = np.concatenate([[0], np.cumsum(levels[0])]).astype(np.int64)
    return VarColumn(values.reshape(int(offsets[-1]), *spec.shape), offsets)


def _image_shapes(spec: FieldSpec, levels: list[np.ndarray], where: str, first: int) -> np.ndarray:
    """Each raw image's shape from its list levels: the rows of an image have one number
    of pixels, its pixels one number of channels, each as the field says where it does."""
    kind = spec.kind
    assert isinstance(kind, Image)
    wants = (kind.height, kind.width, kind.channels)[: len(levels)]
    lists = np.ones(len(levels[0]), np.int64)  # each record's lists at this level
    axes = []
    for depth, (lengths, want) in enumerate(zip(levels, wants, strict=True)):
        ends = np.cumsum(lists)
        size = np.zeros_like(lists)  # a record's length here: that of its first list
        if len(lengths):
            size = np.where(lists > 0, lengths[np.minimum(ends - lists, len(lengths) - 1)], 0)
        bad = np.searchsorted(ends, np.flatnonzero(np.repeat(size, lists) != lengths), "right")
        if want is not None:
            bad = np.concatenate([bad, np.flatnonzero((lists > 0) & (size != want))])
        if len(bad):
            raise CodecIOError(
                f"{where}, record {first + int(bad.min())}: not an image of the field's shape "
                f"(axis {depth} varies within it or differs from the field's)"
            )
        axes.append(size)
        lists = lists * size
    return np.stack(axes, 1)
