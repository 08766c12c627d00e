"""JSON documents and JSON Lines: records as objects, one field per key.

Reading follows one generic rule (pyspacer's feature files are one case of it):

* the records are the document's top-level list of objects, or the list of
  objects held by one of its top-level members (``{"point_features": [...]}``);
  several such members are one split each, named by their keys. JSON Lines
  holds one object per line;
* per field: JSON numbers become int64 (all integers) or float64 fields,
  ``true``/``false`` bool fields, lists of numbers of one length fixed-shape
  fields (``(1280,)``), lists whose length varies ragged fields, strings
  string fields;
* every other top-level member (``"feature_dim": 1280``) is a root attribute;
  columnar documents (lists of values) follow :mod:`dstore.codecs.json.columns`.

A record whose value disagrees in kind with the field's first record (a
number here, a string there), a missing key, a ``null`` or a truncated file is
refused with one line naming the file, field and record.

Writing gives the same shape of document, one record per line, the root
attributes as top-level members and dstore's schema as the member
``"dstore:schema"`` (the last line of a JSON Lines file), so that a round trip
restores kinds and dtypes JSON cannot tell (float32 vs float64, big-endian,
complex numbers as ``[re, im]``, bytes and encoded images as base64, raw
images as nested lists). NaN and infinities are written as Python's json
writes them (``NaN``, ``Infinity``); a NaN whose bits are not numpy's NaN (a
payload, a sign) as the string ``"nan:0x<bits>"``, so values come back bit
for bit.

Parsing uses orjson when it is installed (the ``json`` extra: 5x faster than
the standard library on float arrays, see ``benchmarks/bench_json.py``) and
the standard library otherwise, or when orjson refuses a document the standard
library reads (``NaN``/``Infinity``), whose message with line and column is
the one reported for a broken file. Numbers follow one rule whichever parser
runs: a literal beyond float64 (``1e400``, which the standard library reads as
inf) and an integer beyond 64 bits (which orjson reads as a float64 from 2**64
on) are refused naming the record and field. orjson's floats of 2**63 or
more in magnitude (rare in data, and what it makes of such integers) send the
document to the standard library's parser with checking hooks, which
decides. Nesting deeper than a parser follows is one error, not a
``RecursionError``.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, ClassVar

import numpy as np

from ... import fs
from ...abc import Codec, Reader, Writer
from ...bounded_json import read_json_lines, read_json_text
from ...errors import CodecIOError, DstoreError, SchemaError
from ...fs import is_regular_file, read_at
from ...model import Bytes, Column, Image, Kind, Ragged, String, Tensor, VarColumn, infer_column
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

__all__ = ["JsonCodec", "JsonLinesCodec", "JsonRangeError", "loads"]

#: Member holding dstore's schema (a JSON Lines file's last line).
SCHEMA_MEMBER = "dstore:schema"
#: Schema attribute naming the member the default split's records came from.
RECORDS_ATTR = "json.records"


class JsonRangeError(ValueError):
    """A JSON number no field can hold, or a document nested too deeply: not a parse error.

    ``str(e)`` says where (record, field) and what; the reader prefixes the file."""


#: The integers a JSON integer may be: what an int64 or uint64 field holds (an
#: inferred integer field is int64: beyond it, the record is named then).
_INT_RANGE = (-(2**63), 2**64 - 1)
#: orjson parses an integer literal from 2**64 on (or below -2**63) as a float64,
#: silently: a document holding a float of this magnitude is parsed again by the
#: checked standard-library parser, which keeps integers as written and decides.
_HUGE = 2.0**63


@dataclass(frozen=True)
class _OutOfRange:
    """Stands in for a number the checked parser could not keep: found and named after."""

    text: str
    what: str


def _stdlib_loads(data: bytes | str, records: bool = False) -> Any:
    """The standard library's parser, with one rule for numbers: a float literal beyond
    float64 (``1e400``, which it reads as inf) or an integer beyond 64 bits (what
    neither an int64 nor a uint64 field holds) is refused, naming where it is."""
    lo, hi = _INT_RANGE
    bad: list[_OutOfRange] = []

    def checked_int(text: str) -> int | _OutOfRange:
        value = int(text)
        if lo <= value <= hi:
            return value
        bad.append(_OutOfRange(text, "does not fit in 64 bits"))
        return bad[-1]

    def checked_float(text: str) -> float | _OutOfRange:
        # literals with a fraction or exponent only: NaN and Infinity are constants
        value = float(text)
        if math.isfinite(value):
            return value
        bad.append(_OutOfRange(text, "is beyond float64's range"))
        return bad[-1]

    try:
        doc = json.loads(data, parse_int=checked_int, parse_float=checked_float)
    except RecursionError:
        raise JsonRangeError("nested too deeply for Python's parser") from None
    if bad:
        try:
            found = _find_out_of_range(doc, ())
        except RecursionError:  # parsed just within the limit, walked beyond it
            found = None
        where, value = found if found is not None else ((), bad[0])
        raise JsonRangeError(
            f"{_describe_path(where, records)}: the number {value.text[:40]} {value.what}"
        )
    return doc


def _find_out_of_range(
    value: Any, path: tuple[tuple[Any, Any], ...]
) -> tuple[tuple[tuple[Any, Any], ...], _OutOfRange] | None:
    """The first :class:`_OutOfRange` in a parsed document, and the (container, key)
    pairs leading to it (the recursive parser read it: its depth is bounded)."""
    if isinstance(value, _OutOfRange):
        return path, value
    items: Any = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, (dict, list, _OutOfRange)):
            found = _find_out_of_range(item, (*path, (value, key)))
            if found is not None:
                return found
    return None


def _describe_path(path: tuple[tuple[Any, Any], ...], records: bool) -> str:
    """(container, key) pairs into a document in dstore's words: the records of a list
    of objects and their fields, items of a list, members of other objects.
    ``records``: the document itself is one record (a JSON Lines line)."""
    words = []
    in_record = records
    for container, key in path:
        if isinstance(container, list):
            in_record = all(isinstance(v, dict) for v in container)
            words.append(f"record {key}" if in_record else f"item {key}")
        else:
            words.append(f"field {key!r}" if in_record else f"member {key!r}")
            in_record = False
    return ", ".join(words) or "the document"


@functools.cache  # chosen once per process
def _pick_loads() -> Callable[[bytes, bool], Any]:
    try:
        import orjson
    except ImportError:
        return _stdlib_loads
    fast = orjson.loads

    def loads(data: bytes, records: bool = False) -> Any:
        try:
            return fast(data)
        except orjson.JSONDecodeError as e:
            if "recursion" in str(e):
                raise JsonRangeError(f"nested too deeply ({e})") from None
            # NaN/Infinity and 1e400 are stdlib-only; a broken file gets its message
            return _stdlib_loads(data, records)

    return loads


def loads(data: bytes, records: bool = False) -> Any:
    """Parse one JSON text (orjson if installed, else the standard library). A number
    beyond float64 (``1e400``) or nesting beyond the parser's depth is a
    :class:`JsonRangeError` saying where (``records``: the text is one record, as a
    JSON Lines line is); so is an integer beyond 64 bits, except that orjson reads
    those from 2**64 on as floats (see :func:`_has_huge_float`, and the reader)."""
    return _pick_loads()(data, records)


def _has_huge_float(value: Any) -> bool:
    """Does a parsed value (columns, attributes) hold a float of 2**63 or more in
    magnitude, which orjson may have made of an integer literal? (A loop, not a
    recursion: orjson accepts nesting deeper than Python's recursion limit.)"""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, VarColumn):
            item = item.values
        if isinstance(item, np.ndarray):
            # float16 cannot hold 2**63 (nor be compared with it without a warning)
            wide = item.dtype.kind in "fc" and item.dtype.itemsize > 2
            if wide and np.any(np.abs(item) >= _HUGE):
                return True
        elif isinstance(item, float):
            if abs(item) >= _HUGE:
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


# ---------------------------------------------------------------------------- reading


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _first_disagreeing(values: list[Any], test: Callable[[Any], bool]) -> int | None:
    return next((i for i, v in enumerate(values) if not test(v)), None)


def _infer_field(values: list[Any], where: str) -> tuple[Kind, Column]:
    """The kind of one field's values (a record each) and the column of them."""
    first = values[0]

    def refuse(i: int) -> SchemaError:
        return SchemaError(
            f"{where}, record {i}: {_type_name(values[i])}, but record 0 is {_type_name(first)} "
            "(every record of a field must hold the same kind of value)"
        )

    if isinstance(first, bool):
        bad = _first_disagreeing(values, lambda v: isinstance(v, bool))
        if bad is not None:
            raise refuse(bad)
        return Tensor(np.dtype(bool), ()), np.array(values, dtype=bool)
    if isinstance(first, (int, float)):
        bad = _first_disagreeing(
            values, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        )
        if bad is not None:
            raise refuse(bad)
        if all(isinstance(v, int) for v in values):
            lo, hi = _INT_RANGE[0], 2**63 - 1
            bad = _first_disagreeing(values, lambda v: lo <= v <= hi)
            if bad is not None:
                raise SchemaError(
                    f"{where}, record {bad}: the integer {values[bad]} does not fit in int64"
                )
            return Tensor(np.dtype(np.int64), ()), np.array(values, dtype=np.int64)
        return Tensor(np.dtype(np.float64), ()), np.array(values, dtype=np.float64)
    if isinstance(first, str):
        bad = _first_disagreeing(values, lambda v: isinstance(v, str))
        if bad is not None:
            raise refuse(bad)
        return String(), VarColumn.from_strings(values)
    if isinstance(first, list):
        bad = _first_disagreeing(values, lambda v: isinstance(v, list))
        if bad is not None:
            raise refuse(bad)
        # one fast path for the common case: equal-length lists of numbers
        try:
            arr = np.array(values)
        except (ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind in "bif" and arr.ndim >= 2:
            return Tensor(arr.dtype, arr.shape[1:]), arr
        return infer_column([_numeric(v, where, i) for i, v in enumerate(values)], where)
    if first is None:
        raise SchemaError(f"{where}, record 0: null (a missing value) is not supported")
    raise SchemaError(f"{where}, record 0: nested objects are not supported")


def _numeric(value: list[Any], where: str, i: int) -> np.ndarray:
    try:
        arr = np.array(value)
    except (ValueError, OverflowError) as e:
        raise SchemaError(f"{where}, record {i}: not a rectangular list of numbers ({e})") from None
    if arr.dtype.kind not in "bif" and arr.size:
        raise SchemaError(
            f"{where}, record {i}: the list holds something else than numbers "
            "(lists of numbers only)"
        )
    if arr.size == 0:
        arr = arr.astype(np.int64)  # an empty list says nothing; the others decide
    return arr if arr.ndim else arr.reshape(1)


def _bits_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"{dtype.byteorder if dtype.byteorder in '<>' else '='}u{dtype.itemsize}")


def _numbers(values: Any, dtype: np.dtype) -> np.ndarray:
    """JSON numbers (nested lists) as an array of ``dtype``. Complex values are
    ``[re, im]`` pairs; a NaN whose bits are not numpy's NaN is the string
    ``"nan:0x<bits>"`` (written so by :func:`_json_numbers`)."""
    target = dtype
    if dtype.kind == "c":  # parts of the same byte order and half the size
        order = dtype.byteorder if dtype.byteorder in "<>" else "="
        target = np.dtype(f"{order}f{dtype.itemsize // 2}")
    try:
        arr = np.array(values, dtype=target)
    except ValueError:  # NaN payloads as strings: only in dstore's own float fields
        if target.kind != "f":
            raise
        obj = np.array(values, dtype=object)
        texts = np.frompyfunc(lambda v: isinstance(v, str), 1, 1)(obj).astype(bool)
        arr = np.zeros(obj.shape, target)
        arr[~texts] = obj[~texts].astype(target)
        if texts.any():
            bits = [int(str(t).removeprefix("nan:"), 16) for t in obj[texts]]
            arr[texts] = np.array(bits, _bits_dtype(target)).view(target)
    if dtype.kind == "c":
        if arr.size == 0:  # no pair to pair up: the caller gives the shape
            return np.zeros(0, dtype)
        arr = np.ascontiguousarray(arr).view(dtype)[..., 0]
    return arr


def _json_numbers(arr: np.ndarray) -> Any:
    """An array as nested lists of JSON numbers; the inverse of :func:`_numbers`."""
    if arr.dtype.kind == "c":
        part = arr.dtype.byteorder if arr.dtype.byteorder in "<>" else "="
        arr = (
            np.ascontiguousarray(arr)
            .view(f"{part}f{arr.dtype.itemsize // 2}")
            .reshape((*arr.shape, 2))
        )
    if arr.dtype.kind == "f":
        nan = np.isnan(arr)
        if nan.any():
            bits = arr.view(_bits_dtype(arr.dtype))
            odd = nan & (bits != np.array(np.nan, arr.dtype).view(_bits_dtype(arr.dtype)))
            if odd.any():  # a payload or sign JSON's NaN cannot carry
                width = arr.dtype.itemsize * 2
                obj = arr.astype(object)
                obj[odd] = [f"nan:0x{int(b):0{width}x}" for b in bits[odd]]
                return obj.tolist()
    return arr.tolist()


def _column_of(kind: Kind, values: list[Any], where: str) -> Column:
    """Values of one field as a column of the kind dstore's schema names."""
    try:
        if isinstance(kind, Tensor) or (isinstance(kind, Image) and kind.is_dense):
            shape = kind.shape if isinstance(kind, Tensor) else (kind.shape or ())
            arr = _numbers(values, kind.value_dtype)
            if arr.shape != (len(values), *shape):
                arr = arr.reshape((len(values), *shape))
            return arr
        if isinstance(kind, String):
            return VarColumn.from_strings(values)
        if isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw"):
            return VarColumn.from_bytes(base64.b64decode(v, validate=True) for v in values)
        if isinstance(kind, Ragged):
            rows = [_numbers(v, kind.dtype).reshape((-1, *kind.inner_shape)) for v in values]
            return VarColumn.from_rows(rows, kind.dtype, kind.inner_shape)
        if isinstance(kind, Image):  # raw pixels of varying size: nested lists
            arrays = [np.array(v, dtype=kind.dtype) for v in values]
            flat = VarColumn.from_rows([a.reshape(-1) for a in arrays], kind.dtype)
            ndim = 2 if kind.channels == 0 else 3
            shapes = np.array([a.shape for a in arrays], np.int64).reshape(len(arrays), ndim)
            return VarColumn(flat.values, flat.offsets, shapes)
    except (ValueError, TypeError, OverflowError) as e:
        raise SchemaError(f"{where}: values do not fit {kind.describe()}: {e}") from None
    raise SchemaError(f"{where}: {kind.describe()} fields are not supported in JSON")


def _records_key(schema: Schema, split: str) -> str:
    """The member holding a split's records: its name, or for the default split the
    member it was read from (pyspacer's ``point_features``)."""
    if split == DEFAULT_SPLIT:
        return str(schema.attrs.get(RECORDS_ATTR, DEFAULT_SPLIT))
    return split


def _columns(
    records: list[dict[str, Any]], where: str, kinds: dict[str, Kind] | None
) -> tuple[dict[str, Kind], dict[str, Column]]:
    """Records (objects) to columns: kinds given by dstore's schema, else inferred."""
    names: list[str] = list(kinds) if kinds is not None else list(records[0]) if records else []
    values: dict[str, list[Any]] = {n: [] for n in names}
    for i, rec in enumerate(records):
        if len(rec) != len(names) or any(n not in rec for n in names):
            missing = [n for n in names if n not in rec]
            extra = [k for k in rec if k not in values]
            what = f"has no field {missing[0]!r}" if missing else f"has an extra field {extra[0]!r}"
            raise SchemaError(f"{where}, record {i} {what} (record 0 has {names})")
        for n in names:
            values[n].append(rec[n])
    out_kinds: dict[str, Kind] = {}
    cols: dict[str, Column] = {}
    for n in names:
        fwhere = f"{where}, field {n!r}"
        if kinds is not None:
            out_kinds[n], cols[n] = kinds[n], _column_of(kinds[n], values[n], fwhere)
        else:
            out_kinds[n], cols[n] = _infer_field(values[n], fwhere)
    return out_kinds, cols


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
        records = []
        stored_json = None
        for n, line in enumerate(data, 1):
            if not line.strip():
                continue
            try:
                obj = parse(line, True)
            except JsonRangeError as e:
                raise CodecIOError(f"{self.path}, line {n}: {e}") from None
            except ValueError as e:
                raise _parse_error(self.path, e, n) from None
            if not isinstance(obj, dict):
                raise SchemaError(f"{self.path}, line {n}: {_type_name(obj)}, not an object")
            if SCHEMA_MEMBER in obj and len(obj) == 1:
                stored_json = obj[SCHEMA_MEMBER]
                continue
            records.append(obj)
        if stored_json is not None:
            counts = {s: sp.count for s, sp in Schema.from_json(stored_json).splits.items()}
            if sum(counts.values()) == len(records):  # the splits follow each other
                out, pos = {}, 0
                for s, c in counts.items():
                    out[s], pos = records[pos : pos + c], pos + c
                stored = self._stored(stored_json, counts)
                if stored is not None:
                    return out, {}, stored
        return {DEFAULT_SPLIT: records}, {}, None

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


# ---------------------------------------------------------------------------- writing


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


class JsonWriter(Writer):
    """Streams records to the file as they come; the schema (with the checksums the
    caller adds before ``close``) is written last."""

    def __init__(self, path: str, schema: Schema, lines: bool) -> None:
        super().__init__(path, schema)
        self.lines = lines
        try:
            self._f: IO[bytes] = open(path, "wb")  # noqa: SIM115 - closed in close/abort
        except OSError as e:
            raise CodecIOError(f"{path}: cannot create: {e}") from None
        self._pending = list(schema.splits)
        self._current: str | None = None
        self._first = True  # no record yet in the current split
        self._any_split = False
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

    def write(self, split: str, batch: Batch) -> None:
        if self._current != split:
            self._start(split)
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
                out.append(text + "\n")
            else:
                out.append(("\n" if self._first else ",\n") + text)
                self._first = False
        self._f.write("".join(out).encode("utf-8"))

    def close(self) -> None:
        self._start(None)
        schema_json = json.dumps(self.schema.to_json(), allow_nan=False)
        if self.lines:
            self._f.write(b'{"' + SCHEMA_MEMBER.encode() + b'": ' + schema_json.encode() + b"}\n")
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


# ---------------------------------------------------------------------------- codecs


@dataclass(frozen=True)
class _NoOptions:
    pass


class JsonCodec(Codec):
    """A JSON document of records (``.json``)."""

    name = "json"
    extensions: ClassVar[tuple[str, ...]] = (".json",)
    stores_text = True
    kinds = (Tensor, String, Bytes, Ragged, Image)
    keeps_empty_rows = False  # its reader takes a record as the values it holds
    Options = _NoOptions
    lines, media_type = False, "application/json"  # the Croissant encodingFormat

    def supports(self, dtype: np.dtype) -> bool:
        return dtype.kind in "biufc"  # complex numbers as [re, im]

    @classmethod
    def owns(cls, path: str) -> bool:
        """A JSON file dstore wrote: it ends with its schema member."""
        if not is_regular_file(path):
            return False
        size = fs.getsize(path)
        return SCHEMA_MEMBER.encode() in read_at(path, max(0, size - 65536), 65536)

    def attribute_notes(self, schema: Schema) -> list[str]:
        # root attributes that are JSON scalars are top-level members; the rest stay in
        # dstore's schema member, which any JSON reader sees too
        return []

    def open_reader(self, path: str) -> Reader:
        return JsonReader(path, self.lines)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        return JsonWriter(path, schema, self.lines)


class JsonLinesCodec(JsonCodec):
    """JSON Lines (``.jsonl``): one record object per line."""

    name = "jsonl"
    extensions = (".jsonl", ".ndjson")
    lines, media_type = True, "application/jsonlines"
