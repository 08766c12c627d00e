"""Names from data (split and field names) -> names in storage: the one escape rule.

Split and field names come from the data (npz keys, HDF5 paths, TFRecord
feature names, dict keys given to :func:`dstore.save`), so they may hold
anything: ``..``, a leading ``/``, ``\\``, NUL, 300 characters, emoji. Every
codec turns them into storage names here, and only here:

* :func:`escape` maps any name to one safe path component, deterministically
  and injectively: ``%``-escapes (UTF-8 bytes) of ``/ \\ % ~``, control
  characters and lone surrogates; a leading ``.`` (so never ``.``, ``..`` or a
  hidden file); the empty name as ``%``; the reserved ``zarr.json``; a name
  over :data:`MAX_BYTES` UTF-8 bytes is cut and ends in ``~`` plus 16 hex digits
  of its sha256 (``~`` is escaped everywhere else, so a cut name never equals
  another name's escape). Ordinary names (``train``, ``x_train``, ``image``,
  ``a b``, ``é``) are their own escape: files of normal data do not change.
* :func:`split_parts` keeps a split like ``a/b/c`` as nested groups when each
  part is already plain (the layout HDF5 and zarr users expect), else makes
  it one escaped component.
* The original names are not recovered from storage names but from the
  schema every format already stores (zip comment, zarr/HDF5 attributes,
  TFRecord manifest): readers compute where each schema entry is stored,
  so this rule is part of the file formats (change it and older files no
  longer read). :func:`unescape` inverts :func:`escape` for names that were
  not cut.
* :func:`safe_join` is the defence in depth of every writer: a path it
  builds from parts never resolves outside its root, whatever produced them.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

from ..errors import SchemaError, UnsafePathError
from ..fs import is_url

if TYPE_CHECKING:
    from .schema import Schema

__all__ = [
    "MAX_BYTES",
    "check_case_distinct",
    "check_relative",
    "check_text_names",
    "check_tree",
    "escape",
    "escape_dotless",
    "field_path",
    "fold",
    "is_plain",
    "is_utf8_text",
    "printable",
    "safe_join",
    "shown",
    "split_parts",
    "unescape",
]

#: Longest storage name in UTF-8 bytes: a TFRecord shard adds ``-00000-of-00000.tfrecord.part``
#: (29 bytes) and file names stop at 255 bytes on common file systems.
MAX_BYTES = 200
_HASH_HEX = 16
#: names a format keeps for itself inside a group (zarr v3 metadata file)
_RESERVED = frozenset({"zarr.json"})
_ESCAPE_RE = re.compile(r"%([0-9A-F]{2})")


def _unsafe(ch: str) -> bool:
    code = ord(ch)
    return ch in "/\\%~" or code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF


def _quote(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def _shorten(escaped: str, name: str) -> str:
    """Cut ``escaped`` to fit :data:`MAX_BYTES` with a hash of the original ``name``."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_HEX]
    budget = MAX_BYTES - 1 - _HASH_HEX
    out, used, i = [], 0, 0
    while i < len(escaped):
        # an escape (%XX) is kept whole or dropped whole, so the prefix stays decodable
        token = escaped[i : i + 3] if escaped[i] == "%" and i + 3 <= len(escaped) else escaped[i]
        size = len(token.encode("utf-8", "surrogatepass"))
        if used + size > budget:
            break
        out.append(token)
        used += size
        i += len(token)
    return "".join(out) + "~" + digest


def escape(name: str) -> str:
    """The one safe path component that stores ``name`` (see the module doc)."""
    if name == "":
        return "%"
    out = "".join(_quote(ch) if _unsafe(ch) else ch for ch in name)
    if out.startswith("."):
        out = "%2E" + out[1:]
    if out in _RESERVED:
        out = out.replace(".", "%2E")
    if len(out.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        out = _shorten(out, name)
    return out


def escape_dotless(name: str) -> str:
    """:func:`escape`, and every ``.`` as ``%2E`` too: one part of a name split at its
    dots (WebDataset's members ``<key>.<field>.<ext>``); :func:`unescape` inverts it."""
    return escape(name).replace(".", "%2E")


def is_utf8_text(name: str) -> bool:
    """True when ``name`` is valid Unicode text (no lone surrogate), as protobuf keys,
    Arrow column names and file names on object stores must be."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text_names(schema: Schema, codec: str, why: str) -> None:
    """Refuse split and field names that are not Unicode text where ``why`` (a format whose
    names are UTF-8: Arrow columns, shard files) needs them to be, naming the first."""
    for split in schema.splits.values():
        for name in (split.name, *split.fields):
            if not is_utf8_text(name):
                raise SchemaError(
                    f"{codec}: split {split.name!r}, field {name!r}: the name is not valid "
                    f"Unicode text (a lone surrogate); rename it before writing {why}"
                )


def unescape(stored: str) -> str:
    """The name whose :func:`escape` is ``stored``, for names that were not cut.

    A cut name (ending in ``~`` and a hash) cannot be inverted: the schema
    stored with the data holds the original."""
    if stored == "%":
        return ""
    if "~" in stored:
        raise ValueError(f"{stored!r} is a shortened name: its original is only in the schema")
    pieces = _ESCAPE_RE.split(stored)  # text, hex, text, hex, ..., text
    out = bytearray()
    for i, piece in enumerate(pieces):
        out += bytes([int(piece, 16)]) if i % 2 else piece.encode("utf-8", "surrogatepass")
    return out.decode("utf-8", "surrogatepass")


def is_plain(name: str) -> bool:
    """True when ``name`` is stored as it is."""
    return escape(name) == name


def split_parts(split: str) -> list[str]:
    """The group path of a split: ``a/b/c`` nested when every part is plain, else one escaped name."""
    parts = split.split("/")
    if len(parts) > 1 and all(is_plain(p) for p in parts):
        return parts
    return [escape(split)]


def field_path(split: str, field: str) -> list[str]:
    """Where a field is stored in a group tree (zarr, HDF5) or a flat key space (npz)."""
    return [*split_parts(split), escape(field)]


def check_tree(schema: Schema, where: str) -> None:
    """Refuse layouts where one split's field would be the group of another split.

    Nested splits share groups (``a/b`` beside ``a/b/c`` is fine), but a field
    ``x`` of split ``train`` and a split ``train/x`` both need ``train/x``."""
    groups: dict[tuple[str, ...], str] = {}
    for split_name in schema.splits:
        parts = split_parts(split_name)
        for n in range(1, len(parts) + 1):
            groups.setdefault(tuple(parts[:n]), split_name)
    for split in schema.splits.values():
        for field in split.fields:
            path = tuple(field_path(split.name, field))
            other = groups.get(path)
            if other is not None:
                raise SchemaError(
                    f"{where}: field {field!r} of split {split.name!r} and split {other!r} would both "
                    f"be stored at {'/'.join(path)!r}; rename one of them"
                )


def fold(stored: str) -> str:
    """``stored`` as a file system that ignores case and Unicode normalization (macOS)
    compares names: Unicode's canonical caseless match (``é`` = ``e`` + U+0301)."""
    nfd = unicodedata.normalize("NFD", stored)
    return unicodedata.normalize("NFD", nfd.casefold())


def check_case_distinct(stored: Iterable[tuple[str, str]], what: str, why: str) -> None:
    """Refuse two names whose storage names (``(name, stored)`` pairs) are equal ignoring
    case: on a case-insensitive file system (macOS, Windows) one file would replace the
    other without a word, and ``why`` says where else it matters.

    Names are not escaped further for such file systems (``CON``, ``a:b``): the escape
    rule is part of the file formats; a system that cannot create such a file makes
    the write fail, which is one error line."""
    seen: dict[str, tuple[str, str]] = {}
    for name, key in stored:
        other = seen.setdefault(fold(key), (name, key))
        if other[0] == name:
            continue
        if other[1] == key:
            raise SchemaError(
                f"{what} {shown(other[0])} and {shown(name)} would both be stored as "
                f"{key!r}; rename one of them"
            )
        raise SchemaError(
            f"{what} {shown(other[0])} and {shown(name)} would be stored as {other[1]!r} "
            f"and {key!r}, one name where case does not count ({why}); rename one of them"
        )


def _check_component(part: str, root: str) -> None:
    if part in ("", ".", "..") or "/" in part or "\\" in part or "\x00" in part:
        raise UnsafePathError(
            f"{root}: refusing to write {part!r}: not a plain name inside the output"
        )


def safe_join(root: str, *parts: str) -> str:
    """``root/part/...``, refused (one error) if it would resolve outside ``root``.

    Every part must be one plain component; for a local root the resolved
    path (symlinks followed) must stay under the resolved root too."""
    for part in parts:
        _check_component(part, root)
    if is_url(root):  # object stores have no ``..`` or symlinks: plain parts are enough
        return "/".join([root.rstrip("/"), *parts])
    path = os.path.join(root, *parts)
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafePathError(
            f"{root}: refusing to write {'/'.join(parts)!r}: it resolves to {real}, outside"
        )
    return path


def check_relative(root: str, rel: str) -> None:
    """Refuse a stored relative path (``a/b/c``) that could leave ``root``."""
    for part in rel.split("/"):
        _check_component(part, root)


# ------------------------------------------------------------- names in printed text

#: Characters that make a name ambiguous in a report line (besides unprintable ones):
#: separators the lines use, and quotes (so a quoted name is never mistaken for a plain one).
_AMBIGUOUS = frozenset(" /:'\"\\")


def shown(name: str) -> str:
    """A name from the data as a report prints it: as it is when plain, else quoted
    ``repr``-style, so that a newline, an escape sequence or ``": ok"`` in a field
    name cannot end a line, recolour a terminal or fake a result."""
    if name and name.isprintable() and not _AMBIGUOUS.intersection(name):
        return name
    return repr(name)


def printable(text: str) -> str:
    """``text`` with every unprintable character escaped as ``repr`` escapes it (a
    newline as ``\\n``, ESC as ``\\x1b``): one line, nothing a terminal acts on."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
