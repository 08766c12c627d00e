"""``tf.train.SequenceExample`` feature lists as fields: inference, decoding, encoding.

A feature list holds one ``Feature`` per step. dstore reads each as a field
whose records vary along their first axis:

* number steps (``int64_list`` / ``float_list``) of ``k`` values each: a
  Ragged int64/float32 field of inner shape ``()`` when ``k`` is 1, else
  ``(k,)`` -- a record is ``(steps, k)``, what TensorFlow's
  ``FixedLenSequenceFeature([k])`` gives;
* byte-string steps of one value each: a list of strings (``StringList``,
  of bytes unless every string is UTF-8).

A feature list a record lacks (or that has no steps) is an empty record.
Steps whose number of values changes -- within a record or between records --
have no fixed inner shape and are refused naming the record. The field's
``attrs`` carry :data:`FEATURE_LIST_ATTR`, so a later TFRecord destination
(even after npz, zarr or HDF5) writes it back as a feature list of a
SequenceExample, its other fields as the context.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import CodecIOError, SchemaError
from ...model import Ragged, StringList
from ...model.schema import FieldSpec
from ...model.strings import first_invalid_utf8
from .wire import BYTES, FLOAT, INT64, SEQ, encode_feature, encode_feature_list

__all__ = [
    "FEATURE_LIST_ATTR",
    "SEQ_ENCODINGS",
    "SequenceStats",
    "empty_record",
    "encode_steps",
    "is_feature_list",
    "sequence_encoding",
    "sequence_value",
    "snippet",
]

#: field attribute marking a field read from (and written back as) a feature list
FEATURE_LIST_ATTR = "tf_feature_list"
#: field encoding -> the wire kind of its feature list
SEQ_ENCODINGS = {"seq_bytes": SEQ + BYTES, "seq_float": SEQ + FLOAT, "seq_int64": SEQ + INT64}


def is_feature_list(spec: FieldSpec) -> bool:
    return bool(spec.attrs.get(FEATURE_LIST_ATTR))


def sequence_encoding(spec: FieldSpec, number_encoding: str) -> str | None:
    """The feature-list encoding of a field marked as one, if its kind still fits one."""
    if not is_feature_list(spec):
        return None
    if isinstance(spec.kind, StringList):
        return "seq_bytes"
    if isinstance(spec.kind, Ragged) and number_encoding in ("int64", "float"):
        return "seq_" + number_encoding
    return None  # e.g. a float16 policy: the values travel as raw bytes of an Example


class SequenceStats:
    """What the inference pass learns about one feature list across a split."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.kind = SEQ  # SEQ alone until a record shows a step
        self.per_step: dict[bytes, tuple[str, int]] = {}  # values per step -> first record
        self.utf8 = True  # every byte string seen so far is UTF-8

    @property
    def looks(self) -> bool:
        """True while the values must be read (byte strings, all UTF-8 so far)."""
        return self.kind == SEQ + BYTES and self.utf8

    def look(self, steps: list[Any]) -> None:
        for step in steps:
            for b in step:
                try:
                    b.decode("utf-8")
                except UnicodeDecodeError:
                    self.utf8 = False
                    return

    def see(self, kind: int, per: bytes, at: tuple[str, int]) -> None:
        if kind > SEQ:
            self.kind = kind
        if per:
            self.per_step.setdefault(per, at)

    def field(self) -> FieldSpec:
        attrs = {FEATURE_LIST_ATTR: True}
        if b"*" in self.per_step or len(self.per_step) > 1:
            path, index = self.per_step.get(b"*") or sorted(self.per_step.values())[1]
            shown = sorted(k.decode() for k in self.per_step if k != b"*")
            raise SchemaError(
                f"{path}: record {index}: feature list {self.name!r} has steps of "
                f"{' and '.join(shown) or 'different numbers of'} values: a ragged field's inner "
                "shape cannot change between steps or records"
            )
        per = int(next(iter(self.per_step), b"1"))
        if self.kind == SEQ + BYTES:
            if per != 1:
                path, index = next(iter(self.per_step.values()))
                raise SchemaError(
                    f"{path}: record {index}: feature list {self.name!r} has steps of {per} byte "
                    "strings; one per step is a list of strings"
                )
            return FieldSpec(self.name, StringList(self.utf8), None, attrs)
        dtype = np.dtype(np.int64 if self.kind == SEQ + INT64 else np.float32)
        return FieldSpec(self.name, Ragged(dtype, () if per == 1 else (per,)), None, attrs)

    @property
    def encoding(self) -> str:
        return {SEQ + BYTES: "seq_bytes", SEQ + INT64: "seq_int64"}.get(self.kind, "seq_float")


def empty_record(spec: FieldSpec) -> Any:
    """The record of a feature list a record lacks: no steps."""
    if isinstance(spec.kind, StringList):
        return []
    return np.empty((0, *spec.shape), spec.dtype)


def sequence_value(encoding: str, spec: FieldSpec, kind: int, steps: list[Any], where: str) -> Any:
    """One record from a feature list's steps, checked against the field."""
    feature = f"feature list {spec.name!r}"
    if kind not in (SEQ, SEQ_ENCODINGS[encoding]):
        raise CodecIOError(f"{where}: {feature} has steps of another kind than its field")
    if encoding == "seq_bytes":
        for j, step in enumerate(steps):
            if len(step) != 1:
                raise CodecIOError(
                    f"{where}: {feature} step {j} holds {len(step)} byte strings, expected 1"
                )
        out = [step[0] for step in steps]
        if isinstance(spec.kind, StringList) and spec.kind.text:
            bad = first_invalid_utf8(out)
            if bad is not None:
                raise CodecIOError(
                    f"{where}: {feature} step {bad[0]}: not valid UTF-8 at byte {bad[1]}"
                )
        return out
    per = int(np.prod(spec.shape))
    for j, step in enumerate(steps):
        if len(step) != per:
            raise CodecIOError(
                f"{where}: {feature} step {j} holds {len(step)} values, the field's steps have "
                f"shape {spec.shape} (a ragged field's inner shape cannot change)"
            )
    if not steps:
        return empty_record(spec)
    flat = np.concatenate(steps)
    if spec.dtype.kind == "u" and spec.dtype.itemsize == 8:
        flat = flat.view("<u8")
    return flat.astype(spec.dtype).reshape(-1, *spec.shape)


def encode_steps(encoding: str, spec: FieldSpec, value: Any) -> bytes:
    """A serialized FeatureList from one record: one Feature per step."""
    if encoding == "seq_bytes":
        return encode_feature_list([encode_feature(BYTES, [b]) for b in value])
    rows = np.asarray(value).reshape(len(value), int(np.prod(spec.shape)))
    if encoding == "seq_int64" and spec.dtype.kind == "u" and spec.dtype.itemsize == 8:
        rows = rows.astype("<u8").view("<i8")
    kind = INT64 if encoding == "seq_int64" else FLOAT
    return encode_feature_list([encode_feature(kind, row) for row in rows])


def snippet(feature: str, spec: FieldSpec, encoding: str) -> tuple[str, str]:
    """(``sequence_features`` entry, value expression) of a feature-list field."""
    native = spec.dtype.newbyteorder("=")
    if encoding == "seq_bytes":
        line = f"    {feature}: tf.io.FixedLenSequenceFeature([], tf.string, allow_missing=True),"
        return line, f"seq[{feature}]"
    dtype = "tf.int64" if encoding == "seq_int64" else "tf.float32"
    dims = list(spec.shape)
    line = f"    {feature}: tf.io.FixedLenSequenceFeature({dims}, {dtype}, allow_missing=True),"
    value = f"seq[{feature}]"
    if native == np.uint64:
        value = f"tf.bitcast({value}, tf.uint64)"
    elif native.name not in ("int64", "float32"):
        value = f"tf.cast({value}, tf.{native.name})"
    return line, value
