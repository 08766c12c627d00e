"""Reading the JSON and JSON Lines files dstore wrote a batch at a time.

dstore writes one record per line and its schema last (:class:`~dstore.codecs.json.writer.JsonWriter`), so
such a file can be read without parsing it whole: at open, the schema is read
from the file's end and one pass over the bytes finds where each record's line
starts (8 bytes per record held); a batch then parses only its own lines. The
layout is checked line by line against the schema -- the document's opening, each
split's ``"name": [`` and closing ``]``, the record counts -- and any difference
(a file edited by hand, pretty-printed, or not dstore's) hands the file to the
whole-document reader, which reads any JSON. Memory stays that of a batch,
whatever the file's size, where parsing a document whole holds every number as a
Python object (about 60 times the raw bytes of a uint8 tile).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from ... import fs
from ...abc import Reader
from ...errors import CodecIOError, SchemaError
from ...fs import is_regular_file
from ...model.schema import Batch, Schema, SplitSpec

__all__ = ["StreamedJsonReader", "open_streamed"]

#: Bytes read from the end of a file to find dstore's schema member.
_TAIL = 4 * 1024 * 1024
#: Bytes scanned at a time for line starts.
_SCAN = 16 * 1024 * 1024
#: Text parsed at once: parsed JSON holds each number as a Python object (about ten
#: times the bytes of its text), so a batch holds at most this much of it.
_PARSE_BYTES = 4 * 1024 * 1024


def _line_starts(path: str, size: int) -> np.ndarray:
    """Offsets of every line's first byte (the first line's, 0, included)."""
    parts = [np.zeros(1, np.int64)]
    with fs.open_binary(path) as f:
        pos = 0
        while pos < size:
            chunk = f.read(_SCAN)
            if not chunk:
                break
            nl = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10)
            parts.append(nl.astype(np.int64) + pos + 1)
            pos += len(chunk)
    starts = np.concatenate(parts)
    return starts[starts < size]


def _read_schema(path: str, size: int, lines: bool) -> tuple[Schema, bool] | None:
    """dstore's schema from the file's last line (JSON Lines) or last member (JSON), and
    whether it is a line of its own (JSON Lines: else the last record carries it)."""
    from .values import SCHEMA_MEMBER

    with fs.open_binary(path) as f:
        f.seek(max(0, size - _TAIL))
        tail = f.read()
    last = tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    member = b'"' + SCHEMA_MEMBER.encode() + b'": '
    if not lines:
        start, alone = (len(member) if last.startswith(member) else -1), True
    elif last.startswith(b"{" + member):
        start, alone = len(member) + 1, True
    else:
        # a record's keys are field names (never this one) and its strings escape every
        # quote: the member's first appearance after ", " is the record's own
        found = last.find(b", " + member)
        start, alone = (found + 2 + len(member) if found > 0 else -1), False
    if start < 0 or not last.endswith(b"}"):
        return None
    try:
        return Schema.from_json(json.loads(last[start:-1])), alone
    except (ValueError, SchemaError, TypeError, AttributeError):
        return None


def open_streamed(path: str, lines: bool) -> StreamedJsonReader | None:
    """A streamed reader of a file dstore wrote, or None (read the document whole)."""
    if not is_regular_file(path):
        return None
    size = fs.getsize(path)
    found = _read_schema(path, size, lines)
    if found is None:
        return None
    schema, alone = found
    starts = _line_starts(path, size)
    records = _record_lines(path, starts, schema, lines, alone)
    if records is None:
        return None
    return StreamedJsonReader(path, schema, starts, records, lines)


def _line(f: object, starts: np.ndarray, i: int) -> bytes:
    f.seek(int(starts[i]))  # type: ignore[attr-defined]
    line: bytes = f.readline()  # type: ignore[attr-defined]
    return line.rstrip(b"\r\n")


def _record_lines(
    path: str, starts: np.ndarray, schema: Schema, lines: bool, alone: bool = True
) -> dict[str, np.ndarray] | None:
    """Per split, the line numbers of its records, if the layout is dstore's."""
    from .values import _records_key

    counts = [sp.count for sp in schema.splits.values()]
    if lines:  # records, then the schema line (or the schema in the last record)
        if len(starts) != sum(counts) + alone:
            return None
        out, pos = {}, 0
        for name, n in zip(schema.splits, counts, strict=True):
            out[name], pos = np.arange(pos, pos + n), pos + n
        return out
    out = {}
    with fs.open_binary(path) as f:
        if _line(f, starts, 0) != b"{":
            return None
        i = 1
        for name, n in zip(schema.splits, counts, strict=True):
            head = json.dumps(_records_key(schema, name)).encode() + b": ["
            if i >= len(starts) or _line(f, starts, i) != head:
                return None
            out[name] = np.arange(i + 1, i + 1 + n)
            i += 1 + n
            if i >= len(starts) or _line(f, starts, i) not in (b"]", b"],"):
                return None
            i += 1
    return out


class StreamedJsonReader(Reader):
    """Records of a dstore JSON (Lines) file, parsed a batch of lines at a time."""

    memory_bytes = 0  # nothing held: dstore.sources.many_files need not spool it

    def __init__(
        self,
        path: str,
        schema: Schema,
        starts: np.ndarray,
        records: dict[str, np.ndarray],
        lines: bool,
    ) -> None:
        self.path, self.schema, self.lines = path, schema, lines
        #: the file's last line: a JSON Lines record there carries dstore's schema too
        self._last = int(starts[-1])
        ends = np.append(starts[1:], fs.getsize(path))
        self._spans = {s: (starts[ix], ends[ix]) for s, ix in records.items()}
        self._kinds = {
            s: {n: f.kind for n, f in sp.fields.items()} for s, sp in schema.splits.items()
        }

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        from .parse import loads
        from .values import SCHEMA_MEMBER, _columns

        first, end = self._spans[spec.name]
        where = f"{self.path}: split {spec.name!r}" if len(self.schema.splits) > 1 else self.path
        kinds = {n: self._kinds[spec.name][n] for n in self._kinds[spec.name]}
        with fs.open_binary(self.path) as f:
            pos = start
            while pos < stop:
                # at most ``rows`` records and _PARSE_BYTES of their text (one at least)
                limit = int(np.searchsorted(end, first[pos] + _PARSE_BYTES, side="right"))
                hi = min(stop, pos + rows, max(pos + 1, limit))
                f.seek(int(first[pos]))
                data = f.read(int(end[hi - 1] - first[pos]))
                records = []
                for k, line in enumerate(data.split(b"\n")[: hi - pos]):
                    text = line.rstrip(b"\r ,")
                    try:
                        obj = loads(text, True)
                    except ValueError as e:
                        raise CodecIOError(
                            f"{where}, record {pos + k}: not valid JSON ({e})"
                        ) from None
                    if not isinstance(obj, dict):
                        raise SchemaError(f"{where}, record {pos + k}: not an object")
                    if self.lines and first[pos + k] == self._last:
                        obj.pop(SCHEMA_MEMBER, None)  # dstore's schema, not a field
                    records.append(obj)
                _, cols = _columns(records, f"{where}, records {pos}..{hi - 1}", kinds)
                yield {n: cols[n] for n in names}
                pos = hi
