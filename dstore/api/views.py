"""Lazy dataset views: ``dstore.open(path)["train"]["x"][:8]`` reads only those records.

A :class:`Dataset` is splits, a :class:`Split` is fields, a :class:`FieldView`
reads records of one field on indexing; all of them sit on one codec reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..abc import Reader
from ..errors import MissingDependencyError, SchemaError
from ..model import Column, Kind, VarColumn, concat_columns, empty_column, record
from ..model.schema import Batch, FieldSpec, Schema, SplitSpec
from ..sources.opening import open_source

if TYPE_CHECKING:
    import pyarrow as pa
    from typing_extensions import Self

__all__ = ["Dataset", "FieldView", "Split", "open"]


class FieldView:
    """Lazy view of one field: ``ds["train"]["x"][:8]`` reads only those records.

    An integer index gives one record as the kind defines it: an ndarray
    (tensors, ragged lists, images), a ``str`` (strings) or ``bytes``
    (bytes, encoded images). A slice of a dense field (tensors, raw images of
    one size) is an ndarray with a record axis; a slice of any other field is
    a list of records.
    """

    def __init__(self, reader: Reader, split: SplitSpec, spec: FieldSpec) -> None:
        self._reader = reader
        self._split = split
        self.spec = spec

    @property
    def kind(self) -> Kind:
        return self.spec.kind

    @property
    def shape(self) -> tuple[int, ...]:
        """(records, *record shape) of a dense field; (records,) otherwise."""
        return (self._split.count, *self.spec.shape) if self.spec.dense else (self._split.count,)

    @property
    def dtype(self) -> np.dtype:
        return self.spec.dtype

    def __len__(self) -> int:
        return self._split.count

    def _read(self, start: int, stop: int) -> Column:
        parts = [
            b[self.spec.name]
            for b in self._reader.iter_batches(
                self._split.name, fields=[self.spec.name], start=start, stop=stop
            )
        ]
        return concat_columns(self.spec.kind, parts)

    def _records(self, col: Column) -> Any:
        if isinstance(col, VarColumn):
            return [record(self.spec.kind, col, i) for i in range(len(col))]
        return col

    def __getitem__(self, index: Any) -> Any:
        n = self._split.count
        if isinstance(index, (int, np.integer)):
            i = int(index) + n if index < 0 else int(index)
            if not 0 <= i < n:
                raise IndexError(f"record {index} out of range for {n} records")
            return record(self.spec.kind, self._read(i, i + 1), 0)
        if isinstance(index, tuple) and index and isinstance(index[0], slice) and self.spec.dense:
            return self[index[0]][(slice(None), *index[1:])]
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                return self._records(self._read(start, max(start, stop)))
            picks = np.arange(start, stop, step)
            if not len(picks):
                return self._records(empty_column(self.spec.kind))
            lo = int(picks.min())
            col = self._read(lo, int(picks.max()) + 1)
            return self._records(
                col.take(picks - lo) if isinstance(col, VarColumn) else col[picks - lo]
            )
        col = self._read(0, n)
        if isinstance(col, VarColumn):
            picks = np.arange(n)[index]
            return self._records(col.take(np.atleast_1d(picks)))
        return col[index]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if not self.spec.dense:
            raise SchemaError(
                f"field {self.spec.name!r} is {self.spec.kind.describe()}: its records vary, "
                "so it is no single array (index it, or read the values + offsets)"
            )
        arr = np.asarray(self._read(0, self._split.count))
        return arr if dtype is None else arr.astype(dtype)

    def __repr__(self) -> str:
        return (
            f"<field {self.spec.name!r} {self.spec.kind.describe()}, {self._split.count} records>"
        )


class Split(Mapping[str, FieldView]):
    """Fields of one split; ``len()`` is the number of fields, ``.count`` of records."""

    def __init__(self, reader: Reader, spec: SplitSpec) -> None:
        self._reader = reader
        self.spec = spec

    @property
    def count(self) -> int:
        return self.spec.count

    def __getitem__(self, name: str) -> FieldView:
        if name not in self.spec.fields:
            raise KeyError(
                f"split {self.spec.name!r} has no field {name!r}; fields: {list(self.spec.fields)}"
            )
        return FieldView(self._reader, self.spec, self.spec.fields[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self.spec.fields)

    def __len__(self) -> int:
        return len(self.spec.fields)

    def iter_batches(self, **kwargs: Any) -> Iterator[Batch]:
        return self._reader.iter_batches(self.spec.name, **kwargs)

    def read(self) -> dict[str, Column]:
        return self._reader.read(self.spec.name)

    def to_arrow(
        self, fields: Sequence[str] | None = None, start: int = 0, stop: int | None = None
    ) -> pa.Table:
        """Records ``start:stop`` of ``fields`` (default: all) as a pyarrow Table, read
        batch by batch from any format, for Polars, DuckDB and pandas
        (``pl.from_arrow(ds["train"].to_arrow())``). Numbers are Arrow numbers, one
        (fixed-size) list per axis of a tensor; a ragged field is a list of those; strings
        ``string``, bytes ``binary``, lists of strings ``list<string>``; encoded images the
        Hugging Face Image struct ``{bytes, path}`` with their bytes as stored; raw pixels
        nested lists of their numbers (uint8), not encoded. Needs pyarrow; numbers are
        shared with the arrays read, not copied."""
        try:
            from ..model.arrow import arrow_encoding, arrow_schema, arrow_table, batch_to_arrow
        except ImportError as e:
            raise MissingDependencyError(
                "parquet", "parquet", "pyarrow", what="Split.to_arrow"
            ) from e
        names = list(self.spec.fields) if fields is None else list(fields)
        specs = {n: self[n].spec for n in names}  # an unknown name is refused as ds[split][n]
        encodings = {n: arrow_encoding(spec) for n, spec in specs.items()}
        where = f"{self._reader.path}: split {self.spec.name!r}"
        batches = self.iter_batches(fields=names, start=start, stop=stop)
        parts = (batch_to_arrow(specs, encodings, b, where)[0] for b in batches)
        return arrow_table(arrow_schema(specs, encodings), parts)


class Dataset(Mapping[str, Split]):
    """A lazily read dataset: splits of fields. Use as a context manager to close files."""

    def __init__(self, reader: Reader, format: str) -> None:
        self.reader = reader
        self.format = format

    @property
    def schema(self) -> Schema:
        return self.reader.schema

    def __getitem__(self, split: str) -> Split:
        return Split(self.reader, self.reader.split(split))

    def __iter__(self) -> Iterator[str]:
        return iter(self.reader.schema.splits)

    def __len__(self) -> int:
        return len(self.reader.schema.splits)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        parts = ", ".join(f"{s.name}: {s.count} records" for s in self.schema.splits.values())
        return f"<dstore.Dataset {self.format} {self.reader.path} ({parts})>"


def open(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    version: int | None = None,
    **options: Any,
) -> Dataset:
    """Open a dataset lazily. ``options`` are the reading codec's, and
    ``follow_links=True``: read what HDF5 external links and virtual datasets, or
    zarr symlinks out of the store, lead to (refused by default). ``version=N`` reads
    the dataset as it was at version N (``dstore log`` lists them; default: the latest).

    >>> ds = dstore.open("data.npz")        # doctest: +SKIP
    >>> ds["train"]["x"][:8].shape          # doctest: +SKIP
    (8, 256, 256, 3)
    """
    if version is not None:
        options = {**options, "version": version}
    codec, reader = open_source(os.fspath(path), format, options)
    return Dataset(reader, codec.name)
