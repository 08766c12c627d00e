"""Writing JSON documents and JSON Lines: one record per line, dstore's schema last.

The layout (which :mod:`.stream` reads back a batch at a time): a document opens
with ``{``, each split's records follow its ``"name": [`` line one per line, the
root attributes that are JSON scalars are top-level members, and the member
``"dstore:schema"`` ends the document. A JSON Lines file is the records, one per
line, the last one carrying dstore's schema as one more member
(``{"x": 1, "dstore:schema": {...}}``): a reader of the lines as records (pandas,
mlcroissant, ``datasets``) finds exactly the records, and a column no field names.
A file without a record (or whose last record has no field) ends with the line
``{"dstore:schema": ...}``, as every JSON Lines file dstore wrote before did.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from ...abc import Writer
from ...errors import CodecIOError, SchemaError
from ...model import Bytes, Column, Image, Kind, String, VarColumn, slice_column
from ...model import attrs as attr_codec
from ...model.schema import Batch, Schema
from .values import SCHEMA_MEMBER, _json_numbers, _records_key

__all__ = ["JsonWriter"]


def _is_json_scalar(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, (str, bool, int))
        or (isinstance(value, float) and math.isfinite(value))
    )


def _records_of(kind: Kind, col: Column) -> list[Any]:
    """One field's batch as JSON-ready values, one per record."""
    if isinstance(kind, String):
        assert isinstance(col, VarColumn)  # a string field's column always is
        return col.to_str_list()
    if isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw"):
        assert isinstance(col, VarColumn)  # as is a bytes or encoded-image field's
        return [base64.b64encode(b).decode("ascii") for b in col.to_bytes_list()]
    if isinstance(col, VarColumn):
        return [_json_numbers(col.row(i)) for i in range(len(col))]
    return _json_numbers(col)


#: Array bytes a writer turns into text at once (its lists of numbers hold ~36 times).
_WRITE_BYTES = 1 << 20


class JsonWriter(Writer):
    """Streams records to the file as they come; the schema (with the checksums the
    caller adds before ``close``) is written last."""

    def __init__(self, path: str, schema: Schema, lines: bool) -> None:
        super().__init__(path, schema)
        self.lines = lines
        self._pending = list(schema.splits)
        self._current: str | None = None
        self._first = True  # no record yet in the current split
        self._any_split = False
        #: JSON Lines: the last record's line, held until the next or the schema joins it
        self._held = ""
        if lines:  # refused before the file is created (nothing left open)
            for split in schema.splits.values():
                if SCHEMA_MEMBER in split.fields:
                    raise SchemaError(
                        f"split {split.name!r}, field {SCHEMA_MEMBER!r}: the name is dstore's "
                        "schema member in a JSON Lines file; rename the field"
                    )
        try:
            self._f: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed in close/abort
        except OSError as e:
            raise CodecIOError(f"{path}: cannot create: {e}") from None
        if not lines:
            self._f.write(b"{")

    def _key(self, split: str) -> str:
        return _records_key(self.schema, split)

    def _start(self, split: str | None) -> None:
        while self._current != split or (split is None and self._pending):
            if self._current is not None and not self.lines:
                self._f.write(b"\n]")
            if not self._pending:
                if split is not None:
                    raise SchemaError(f"split {split!r} is unknown or written out of order")
                self._current = None
                return
            self._current = self._pending.pop(0)
            self._first = True
            if not self.lines:
                sep = b",\n" if self._any_split else b"\n"
                self._f.write(sep + json.dumps(self._key(self._current)).encode() + b": [")
                self._any_split = True

    def park(self) -> None:
        """Close the file until the next ``write`` or ``close``, which reopen it to append
        (a folder of one file per split holds one open, not one per split)."""
        self._f.close()

    def _reopen(self) -> None:
        if self._f.closed:
            try:
                self._f = open(self.path, "ab")  # noqa: SIM115 - closed in close/abort/park
            except OSError as e:
                raise CodecIOError(f"{self.path}: cannot reopen: {e}") from None

    def write(self, split: str, batch: Batch) -> None:
        self._reopen()
        if self._current != split:
            self._start(split)
        # a few MB at a time: as Python lists, numbers take about 36 times their bytes
        n = len(next(iter(batch.values()))) if batch else 0
        step = max(1, n * _WRITE_BYTES // max(1, sum(c.nbytes for c in batch.values())))
        for lo in range(0, n, step):
            part = {k: slice_column(c, lo, min(n, lo + step)) for k, c in batch.items()}
            self._write_records(split, part)

    def _write_records(self, split: str, batch: Batch) -> None:
        spec = self.schema.splits[split]
        names = list(spec.fields)
        columns = [_records_of(spec.fields[n].kind, batch[n]) for n in names]
        keys = [json.dumps(n) for n in names]
        dumps = _dumper(batch)
        out = []
        for values in zip(*columns, strict=True):
            text = (
                "{" + ", ".join(f"{k}: {dumps(v)}" for k, v in zip(keys, values, strict=True)) + "}"
            )
            if self.lines:
                out.append(self._held)
                self._held = text + "\n"
            else:
                out.append(("\n" if self._first else ",\n") + text)
                self._first = False
        self._f.write("".join(out).encode("utf-8"))

    def close(self) -> None:
        self._reopen()
        self._start(None)
        schema_json = json.dumps(self.schema.to_json(), allow_nan=False)
        if self.lines:
            member = '"' + SCHEMA_MEMBER + '": ' + schema_json + "}\n"
            record = self._held.rstrip("\n")
            if record.endswith("}") and record != "{}":  # the last record carries it
                self._f.write((record[:-1] + ", " + member).encode("utf-8"))
            else:
                self._f.write((self._held + "{" + member).encode("utf-8"))
        else:
            root, _ = attr_codec.group_attrs(self.schema.attrs)
            taken = {self._key(s) for s in self.schema.splits} | {SCHEMA_MEMBER}
            for name, enc in root.items():
                value = attr_codec.decode(enc)
                if name not in taken and _is_json_scalar(value):
                    sep = ",\n" if self._any_split else "\n"
                    self._f.write(f"{sep}{json.dumps(name)}: {json.dumps(value)}".encode())
                    self._any_split = True  # a member was written: the next needs a comma
            last = b",\n" if self._any_split else b"\n"
            self._f.write(last + b'"' + SCHEMA_MEMBER.encode() + b'": ' + schema_json.encode())
            self._f.write(b"}\n")
        self._f.close()

    def abort(self) -> None:
        self._f.close()


def _dumps(value: Any) -> str:
    # NaN and infinities as Python's json writes them (NaN, Infinity): read back exactly
    return json.dumps(value, allow_nan=True)


def _dumper(batch: Batch) -> Callable[[Any], str]:
    """orjson where installed and every float is finite (it writes NaN as null), else
    the standard library: the same JSON for the values a batch holds."""
    for col in batch.values():
        if isinstance(col, VarColumn) and col.nested:
            continue  # lists of strings: no floats
        values = col.flat_values if isinstance(col, VarColumn) else col
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            return _dumps
    try:
        import orjson
    except ImportError:
        return _dumps
    fast = orjson.dumps
    return lambda value: fast(value).decode()
