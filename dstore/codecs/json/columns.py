"""Columnar JSON documents: one list per field, ``{"features": [[...], ...], "labels": [...]}``,
as ``json.dump`` writes a dict of arrays' ``.tolist()`` (scikit-learn's ``data``/``target``).

Such a document holds no list of objects, so :mod:`dstore.codecs.json`'s rule for
records finds none; it asks here. The document's lists of the most common length are
the fields of one split (record ``i`` takes item ``i`` of each); lists of another
length (``target_names``) and every other member are attributes, which the reader
notes. Lists whose lengths tie (``features`` 100, ``labels`` 99) are refused: which
ones are the fields cannot be told, and a field missing a value is data lost.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeGuard

from ...errors import SchemaError

__all__ = ["columns_as_records", "is_records", "no_records"]


def is_records(value: Any) -> TypeGuard[list[dict[str, Any]]]:
    """A list of objects: records, not columns."""
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)


def _is_column(value: Any) -> bool:
    """A non-empty list of values (numbers, lists of numbers, strings), not of objects."""
    return isinstance(value, list) and bool(value) and not any(isinstance(v, dict) for v in value)


def columns_as_records(
    members: dict[str, Any], path: str
) -> tuple[list[dict[str, Any]], list[str], list[str]] | None:
    """The records of a columnar document's ``members``, the names of the members that
    are its fields, and notes; None when no member is a list (not columnar)."""
    lengths = {name: len(value) for name, value in members.items() if _is_column(value)}
    if not lengths:
        return None
    counts = Counter(lengths.values()).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        listed = ", ".join(f"{name} ({n} values)" for name, n in lengths.items())
        raise SchemaError(
            f"{path}: no records: its lists are of different lengths ({listed}); a columnar "
            "document's lists are its fields, one value per record: they need one length"
        )
    count = counts[0][0]
    fields = [name for name, n in lengths.items() if n == count]
    records = [
        dict(zip(fields, values, strict=True))
        for values in zip(*(members[f] for f in fields), strict=True)
    ]
    notes = [f"{path}: read as columns: fields {', '.join(fields)} ({count} records each)"]
    others = [f"{name} ({n} values)" for name, n in lengths.items() if n != count]
    if others:
        notes.append(f"{path}: lists of another length kept as attributes: {', '.join(others)}")
    return records, fields, notes


def no_records(path: str, members: dict[str, Any]) -> SchemaError:
    """The error for a document that is neither records nor columns."""
    return SchemaError(
        f"{path}: no records: neither the document nor any of its top-level members "
        f"({', '.join(list(members)[:5])}) is a list of objects or of values"
    )
