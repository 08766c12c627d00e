"""Fields inferred from samples (records as named values, e.g. the members of a tar
sample) read from files dstore did not write, and columns from decoded records."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from ..errors import CodecIOError, SchemaError
from .columns import Column, VarColumn, to_column
from .kinds import Bytes, Image, Ragged, String, Tensor
from .schema import Batch, FieldSpec, SplitSpec

__all__ = ["SampleFields", "array_kind", "records_batch", "records_column"]

T = TypeVar("T")


class SampleFields(Generic[T]):
    """The fields of a split's samples, one ``field(name)`` each, made at the first
    sample: every other sample must hold the same ones (one that lacks a field, or holds
    another, is refused in one line naming both samples and the field)."""

    def __init__(self, field: Callable[[str], T]) -> None:
        self.field = field
        self.fields: dict[str, T] = {}
        self.first: str | None = None

    def sample(self, names: Collection[str], file: str, sample: str) -> dict[str, T]:
        """The fields of ``sample`` (``"sample 'key'"``) of ``file``, whose names are ``names``."""
        if self.first is None:
            self.first, self.fields = f"{sample} of {file}", {n: self.field(n) for n in names}
        elif set(names) != self.fields.keys():
            odd = sorted(set(names) ^ self.fields.keys())[0]
            raise SchemaError(
                f"{file}: {sample} {'has' if odd in names else 'lacks'} field {odd!r} unlike "
                f"{self.first}: every sample of a split must hold the same fields"
            )
        return self.fields


def array_kind(seen: Iterable[tuple[np.dtype, tuple[int, ...]]], where: str) -> Tensor | Ragged:
    """The kind of a field whose records are arrays of the ``(dtype, shape)`` pairs ``seen``:
    a tensor when they are one, ragged when they differ in their first axis only."""
    pairs = {(np.dtype(d), tuple(s)) for d, s in seen}
    if len(pairs) == 1:
        ((dtype, shape),) = pairs
        return Tensor(dtype, shape)
    dtypes, inner = {d for d, _ in pairs}, {s[1:] for _, s in pairs}
    if len(dtypes) == 1 and len(inner) == 1 and all(s for _, s in pairs):
        return Ragged(dtypes.pop(), inner.pop())
    shown = sorted((d.str, s) for d, s in pairs)[:3]
    raise SchemaError(
        f"{where} records differ in dtype or in more than their first axis ({shown} ...), "
        "so they are neither one tensor nor ragged"
    )


def records_column(spec: FieldSpec, values: list[Any], where: str) -> Column:
    """A column of ``spec`` from its records decoded one by one: arrays, or the stored
    bytes of strings, byte strings and encoded images (invalid UTF-8 is a CodecIOError:
    the data as stored is bad)."""
    kind = spec.kind
    if spec.dense:
        return np.stack(values).astype(spec.dtype, copy=False)
    if isinstance(kind, (String, Bytes)) or (isinstance(kind, Image) and kind.encoding != "raw"):
        col = VarColumn.from_bytes(values)
        if isinstance(kind, String):
            try:
                col.check_utf8(where)
            except SchemaError as e:
                raise CodecIOError(str(e)) from None
        return col
    return to_column(kind, values, where)


def records_batch(
    spec: SplitSpec, names: list[str], records: Sequence[T], decode: Callable[[str, T], Any]
) -> Batch:
    """Fields ``names`` of ``records`` of split ``spec``, each value decoded on its own
    by ``decode(field, record)``, as a batch (:func:`records_column`)."""
    return {
        n: records_column(
            spec.fields[n], [decode(n, r) for r in records], f"{spec.name}: field {n!r}"
        )
        for n in names
    }
