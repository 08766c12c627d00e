"""Reading a JSON document or a JSON Lines file whole into columns, the schema from its dstore member."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ...abc import Reader
from ...bounded_json import read_json_lines, read_json_text
from ...errors import CodecIOError, DstoreError, SchemaError
from ...fs import is_regular_file
from ...model import Column, Kind, VarColumn
from ...model import attrs as attr_codec
from ...model.schema import (
    DEFAULT_SPLIT,
    KNOWN_SPLITS,
    Batch,
    FieldSpec,
    Schema,
    SplitSpec,
)
from .columns import columns_as_records, is_records, no_records
from .parse import JsonRangeError, _has_huge_float, _pick_loads, _stdlib_loads
from .values import RECORDS_ATTR, SCHEMA_MEMBER, _columns, _records_key, _type_name


def _parse_error(path: str, e: Exception, line: int | None = None) -> CodecIOError:
    where = f"{path}, line {line}" if line is not None else path
    return CodecIOError(f"{where}: not valid JSON ({e}); is the file truncated?")


_Text = bytes | list[bytes]  # a JSON document, or the lines of a JSON Lines file


class JsonReader(Reader):
    """The whole document, parsed at open into columns (a file is one image's features,
    or a few thousand records: many files are read as one dataset by ``dstore.sources.many_files``)."""

    def __init__(self, path: str, lines: bool) -> None:
        self.path = path
        if not is_regular_file(path):
            raise CodecIOError(f"{path}: no such file")
        data = read_json_lines(path) if lines else read_json_text(path)  # within the limit
        fast = _pick_loads()
        if fast is _stdlib_loads:
            self._load(data, lines, fast)
            return
        try:
            self._load(data, lines, fast)
            again = _has_huge_float(self._data) or _has_huge_float(self._root)
        except DstoreError:
            again = True  # a number out of range is reported as the checked parser sees it
        if again:
            # orjson made an integer literal beyond 64 bits a float (or something failed):
            # the standard library's checked parser reads the document and decides
            self._load(data, lines, _stdlib_loads)

    def _load(self, data: _Text, lines: bool, parse: Callable[[bytes, bool], Any]) -> None:
        """Columns, schema and attributes of the document ``data``, parsed by ``parse``."""
        try:
            self._build(data, lines, parse)
        except RecursionError:
            # orjson takes 1024 levels; what is done with a value after (attributes,
            # lists of numbers) recurses in Python, whose limit is about 1000
            raise CodecIOError(
                f"{self.path}: nested too deeply (Python's recursion limit)"
            ) from None

    def _build(self, data: _Text, lines: bool, parse: Callable[[bytes, bool], Any]) -> None:
        path = self.path
        self._root: dict[str, Any] = {}  # the members that are not records (attributes)
        splits, attrs, stored = (
            self._parse(data, parse) if isinstance(data, bytes) else self._parse_lines(data, parse)
        )
        self._data: dict[str, dict[str, Column]] = {}
        kinds_by_split: dict[str, dict[str, Kind]] = {}
        for split, records in splits.items():
            given = None
            if stored is not None and split in stored.splits:
                given = {n: f.kind for n, f in stored.splits[split].fields.items()}
            where = f"{path}: split {split!r}" if len(splits) > 1 else path
            kinds_by_split[split], self._data[split] = _columns(records, where, given)
        if stored is not None:
            self.schema = stored
        else:
            self.schema = Schema(
                {
                    s: SplitSpec(s, len(splits[s]), {n: FieldSpec(n, k) for n, k in kinds.items()})
                    for s, kinds in kinds_by_split.items()
                },
                attrs,
            )
        #: bytes the parsed columns hold (``dstore.sources.many_files`` spools such files)
        self.memory_bytes = sum(c.nbytes for cols in self._data.values() for c in cols.values())

    @staticmethod
    def _stored(value: Any, counts: dict[str, int]) -> Schema | None:
        """dstore's schema, if it describes these records (else the file was edited: infer)."""
        try:
            schema = Schema.from_json(value)
        except (SchemaError, TypeError, AttributeError):
            return None
        if {s: sp.count for s, sp in schema.splits.items()} != counts:
            return None
        return schema

    def _parse(
        self, data: bytes, parse: Callable[[bytes, bool], Any]
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], Schema | None]:
        try:
            doc = parse(data, False)
        except JsonRangeError as e:
            raise CodecIOError(f"{self.path}: {e}") from None
        except ValueError as e:
            raise _parse_error(self.path, e) from None
        if isinstance(doc, list):
            return self._top_level_list(doc)
        if not isinstance(doc, dict):
            raise SchemaError(f"{self.path}: the document is {_type_name(doc)}, not records")
        stored_json = doc.get(SCHEMA_MEMBER)
        members = {k: v for k, v in doc.items() if k != SCHEMA_MEMBER}
        if stored_json is not None:
            found = self._with_schema(stored_json, members)
            if found is not None:
                return found
        return self._record_members(members)

    def _top_level_list(
        self, doc: list[Any]
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], None]:
        """A document that is a list: one object per record, one split."""
        if not is_records(doc):
            bad = next(i for i, v in enumerate(doc) if not isinstance(v, dict))
            raise SchemaError(
                f"{self.path}, record {bad}: {_type_name(doc[bad])}, not an object "
                "(a top-level list must hold one object per record)"
            )
        return {DEFAULT_SPLIT: doc}, {}, None

    def _record_members(
        self, members: dict[str, Any]
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], None]:
        """An object without dstore's schema: its lists of objects are the splits (one
        such list under another name is the default split), the rest root attrs."""
        lists = [k for k, v in members.items() if isinstance(v, list) and v and is_records(v)]
        columnar = None if lists else columns_as_records(members, self.path)
        if columnar is None and not lists:  # an empty list is the records only if nothing else
            lists = [k for k, v in members.items() if v == []][:1]
        if columnar is None and not lists:
            raise no_records(self.path, members)
        attrs: dict[str, Any] = {}
        if columnar is not None:  # {"features": [[...]], "labels": [...]}: one split
            records, lists, self.notes = columnar
            splits = {DEFAULT_SPLIT: records}
        elif len(lists) == 1 and lists[0] not in KNOWN_SPLITS:
            splits = {DEFAULT_SPLIT: members[lists[0]]}
            if lists[0] != DEFAULT_SPLIT:
                attrs[RECORDS_ATTR] = lists[0]
        else:
            splits = {k: members[k] for k in lists}
        root = {k: v for k, v in members.items() if k not in lists}
        self._root = root
        if root:
            encoded, _ = attr_codec.encode_all(root, self.path)
            attrs[attr_codec.ATTRS_KEY] = {"root": encoded}
        return splits, attrs, None

    def _with_schema(
        self, value: Any, members: dict[str, Any]
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], Schema] | None:
        """The records of each split dstore's schema names, if they are all there."""
        try:
            schema = Schema.from_json(value)
        except (SchemaError, TypeError, AttributeError):
            return None
        splits = {}
        for name, spec in schema.splits.items():
            key = _records_key(schema, name)
            records = members.get(key)
            if not is_records(records) or len(records) != spec.count:
                return None  # edited by hand: read it as any JSON
            splits[name] = records
        return splits, {}, schema

    def _parse_lines(
        self, data: list[bytes], parse: Callable[[bytes, bool], Any]
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], Schema | None]:
        records: list[dict[str, Any]] = []
        stored_json, carrier = None, {}
        last = max((n for n, line in enumerate(data, 1) if line.strip()), default=0)
        for n, line in enumerate(data, 1):
            if not line.strip():
                continue
            try:
                obj = parse(line, True)
            except JsonRangeError as e:
                raise CodecIOError(f"{self.path}, line {n}: {e}") from None
            except ValueError as e:
                if not records and line.strip() in (b"{", b"["):
                    # e.g. written with --to json under a .jsonl name: say what it is
                    raise CodecIOError(
                        f"{self.path}, line {n}: {line.strip().decode()!r} opens one JSON "
                        "document, not a JSON Lines record: read the file as format 'json'"
                    ) from None
                raise _parse_error(self.path, e, n) from None
            if not isinstance(obj, dict):
                raise SchemaError(f"{self.path}, line {n}: {_type_name(obj)}, not an object")
            if SCHEMA_MEMBER in obj and (len(obj) == 1 or n == last):
                # dstore's schema: a line of its own, or a member of the last record
                stored_json, carrier = obj.pop(SCHEMA_MEMBER), obj
                if not obj:
                    continue
            records.append(obj)
        if stored_json is not None:
            found = self._split_records(stored_json, records)
            if found is not None:
                return found
            if carrier:  # a record's own value after all: the file is read as any JSON Lines
                carrier[SCHEMA_MEMBER] = stored_json
        return {DEFAULT_SPLIT: records}, {}, None

    def _split_records(
        self, stored_json: Any, records: list[dict[str, Any]]
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any], Schema] | None:
        """The records split as dstore's schema counts them, if it describes them."""
        try:
            counts = {s: sp.count for s, sp in Schema.from_json(stored_json).splits.items()}
        except (SchemaError, TypeError, AttributeError):
            return None
        if sum(counts.values()) != len(records):
            return None
        out, pos = {}, 0
        for s, c in counts.items():  # the splits follow each other
            out[s], pos = records[pos : pos + c], pos + c
        stored = self._stored(stored_json, counts)
        return None if stored is None else (out, {}, stored)

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        cols = self._data[spec.name]
        for pos in range(start, stop, rows):
            end = min(stop, pos + rows)
            yield {
                n: c.slice(pos, end) if isinstance(c := cols[n], VarColumn) else c[pos:end]
                for n in names
            }


# ---------------------------------------------------------------------------- codecs
