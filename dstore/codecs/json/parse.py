"""Parsing JSON text: the fastest parser installed, integers beyond 64 bits and floats beyond float64 refused with where they are."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...model import VarColumn


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
