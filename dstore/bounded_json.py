"""JSON read from files, within two limits: how many bytes are parsed at once and how
deeply values nest.

Everything dstore reads as JSON from a file it did not just write -- manifests
(``dstore.json``), journals, the ``huggingface`` metadata of Parquet files, a
WebDataset ``.json`` member, a JSON Lines line, a JSON document -- passes here
or through :func:`check_json_size` and :func:`check_depth` first. Python's
parser (and every function that walks a parsed value) recurses once per level:
a file of 100,000 ``[`` would end in ``RecursionError``, and a 1 GB text costs
four to five times its size as Python objects. Beyond either limit the error
is one line naming the file (and record, member or line where there is one).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO, Any, TypeVar

from .errors import CodecIOError
from .limits import env_limit

T = TypeVar("T")

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "JsonLimitError",
    "check_depth",
    "check_json_size",
    "load_json",
    "load_json_file",
    "max_json_bytes",
    "read_json_lines",
    "read_json_text",
]

#: Bytes of JSON text parsed at once (a manifest, a metadata value, a WebDataset
#: member, a JSON Lines line, a JSON document): parsed, a text costs about four to
#: five times its size in memory. 256 MiB is thousands of times a manifest or a
#: record's metadata. Raise it by setting this, or ``DSTORE_MAX_JSON_BYTES`` (which wins).
MAX_JSON_BYTES = 256 << 20
_BYTES_ENV = "DSTORE_MAX_JSON_BYTES"
#: Levels of nested lists and objects a parsed JSON value may have: dstore's own
#: metadata nests under 10, and Python's recursion limit (about 1,000, shared with
#: the code that walks the value) must never be what stops a file.
MAX_JSON_DEPTH = 100


class JsonLimitError(CodecIOError):
    """JSON that does not parse, or not within the limits; ``reason`` is the message
    without the ``where`` it starts with."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.reason = reason


def max_json_bytes() -> int:
    """The JSON size limit in force: ``DSTORE_MAX_JSON_BYTES`` if set, else :data:`MAX_JSON_BYTES`."""
    return env_limit(_BYTES_ENV, MAX_JSON_BYTES)


def check_json_size(size: int, where: str, what: str = "JSON text") -> None:
    """Refuse ``size`` bytes of JSON before they are read or parsed (one line naming ``where``)."""
    limit = max_json_bytes()
    if size > limit:
        raise JsonLimitError(
            where,
            f"{what} of {size:,} bytes is more than the {limit:,} parsed at once "
            f"(set {_BYTES_ENV} or dstore.bounded_json.MAX_JSON_BYTES to raise it)",
        )


def check_depth(value: Any, where: str, what: str = "JSON") -> None:
    """Refuse a parsed value nested deeper than :data:`MAX_JSON_DEPTH` (a loop, not a
    recursion: the value may be as deep as the parser went)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise JsonLimitError(where, f"{what} nested more than {MAX_JSON_DEPTH} levels deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def load_json(data: bytes | str, where: str, what: str = "JSON text") -> Any:
    """``data`` parsed by the standard library within both limits; anything that does
    not parse is one :class:`JsonLimitError` naming ``where``."""
    check_json_size(len(data), where, what)
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonLimitError(
            where, f"{what} nested more than {MAX_JSON_DEPTH} levels deep"
        ) from None
    except ValueError as e:  # UnicodeDecodeError too
        raise JsonLimitError(where, f"{what} is not valid JSON ({e})") from None
    check_depth(value, where, what)
    return value


def load_json_file(path: str, what: str = "JSON file") -> Any:
    """The JSON file at ``path`` (a local path or URL) within both limits: no more than
    the size limit is read. ``OSError`` passes to the caller."""
    from . import fs

    with fs.open_binary(path) as f:
        data = _read_at_most(f, max_json_bytes() + 1)
    return load_json(data, path, what)


def _read_at_most(f: IO[bytes], size: int) -> bytes:
    """Up to ``size`` bytes of ``f``, a MiB at a time: ``f.read(size)`` would allocate
    ``size`` bytes whatever the file holds (256 MiB for every manifest)."""
    parts, left = [], size
    while left > 0 and (part := f.read(min(left, 1 << 20))):
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _more_than(where: str, what: str, limit: int, more: str = "") -> JsonLimitError:
    return JsonLimitError(
        where,
        f"{what} of more than {limit:,} bytes, the most parsed at once (set {_BYTES_ENV} "
        f"or dstore.bounded_json.MAX_JSON_BYTES to raise it{more})",
    )


def read_json_text(path: str) -> bytes:
    """The JSON document at ``path``, no more than the size limit read."""
    limit = max_json_bytes()
    data = _read(path, lambda f: _read_at_most(f, limit + 1))
    if len(data) > limit:
        raise _more_than(path, "a JSON document", limit, "; JSON Lines are parsed a line at a time")
    return data


def read_json_lines(path: str) -> list[bytes]:
    """The lines of the JSON Lines file at ``path``, each no longer than the size limit,
    which is checked before more of a line is read (a line of 1 GB is refused, not held)."""
    limit = max_json_bytes()

    def lines_of(f: IO[bytes]) -> list[bytes]:
        lines = list[bytes]()
        while raw := f.readline(limit + 2):  # the line, then "\r\n" at most
            size = len(raw) - (raw.endswith(b"\n") + raw.endswith(b"\r\n"))
            if size > limit:  # refused before a copy of it is made
                raise _more_than(f"{path}, line {len(lines) + 1}", "a line", limit)
            lines.extend(raw[:size].splitlines() or [b""])
        return lines

    return _read(path, lines_of)


def _read(path: str, read: Callable[[IO[bytes]], T]) -> T:
    from . import fs

    try:
        with fs.open_binary(path) as f:
            return read(f)
    except JsonLimitError:
        raise
    except OSError as e:
        raise CodecIOError(f"{path}: cannot read: {e}") from None
