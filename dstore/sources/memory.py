"""A reader over in-memory Python/numpy values: what :func:`dstore.save` writes from, so
that saving is a conversion like any other."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..abc import Reader
from ..errors import SchemaError
from ..model import Column, Kind, VarColumn, infer_column, slice_column, to_column
from ..model.keys import split_key
from ..model.schema import Batch, FieldSpec, Schema, SplitSpec


class ArrayReader(Reader):
    """A reader over in-memory data (what :func:`save` writes from).

    Each field's kind comes from its value (:func:`dstore.model.infer_column`):
    numeric arrays are tensors, ``<U``/``S`` arrays and lists of ``str`` /
    ``bytes`` are strings / bytes, lists of arrays whose first axis varies are
    ragged; a :class:`~dstore.model.VarColumn` keeps the kind given with it
    through ``kinds={(split, field): kind}``."""

    def __init__(
        self,
        data: Mapping[str, Any],
        path: str = "<memory>",
        kinds: Mapping[tuple[str, str], Kind] | None = None,
    ) -> None:
        self.path = path
        self._data: dict[str, dict[str, Column]] = {}
        nested: dict[str, dict[str, Any]] = {}
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, Mapping):
                nested[str(key)] = {str(k): v for k, v in value.items()}
            else:
                flat[str(key)] = value
        for key, value in flat.items():
            split, name = split_key(key)
            nested.setdefault(split, {})[name] = value
        splits = {}
        for split, fields in nested.items():
            specs = {}
            counts: dict[str, int] = {}
            columns: dict[str, Column] = {}
            for name, value in fields.items():
                where = f"split {split!r}, field {name!r}"
                given = (kinds or {}).get((split, name))
                if isinstance(value, VarColumn) or given is not None:
                    if given is None:
                        raise SchemaError(
                            f"{where}: a VarColumn needs its kind (kinds={{(split, field): kind}})"
                        )
                    kind, col = given, to_column(given, value, where)
                else:
                    kind, col = infer_column(value, where)
                columns[name] = col
                counts[name] = len(col)
                flat_key = next((k for k in flat if split_key(k) == (split, name)), None)
                specs[name] = FieldSpec(name, kind, flat_key)
            if len(set(counts.values())) > 1:
                detail = ", ".join(f"{n} has {c}" for n, c in counts.items())
                raise SchemaError(
                    f"fields of split {split!r} have different record counts ({detail})"
                )
            self._data[split] = columns
            splits[split] = SplitSpec(split, next(iter(counts.values()), 0), specs)
        self.schema = Schema(splits)

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        split = spec.name
        for pos in range(start, stop, rows):
            end = min(stop, pos + rows)
            yield {n: slice_column(self._data[split][n], pos, end) for n in names}
