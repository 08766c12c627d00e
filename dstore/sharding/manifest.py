"""The manifest of a sharded directory: ``dstore.json``, written last.

Its presence means the output is complete. It holds the format's own keys
(:func:`manifest_base` first), then ``splits``: per split its record count and
its shards in order, each ``file``, ``records``, ``bytes`` and ``sha256``;
then ``run`` (what a ``--resume`` must find equal). Shard names in it are
relative to its folder and never lead outside it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from .. import fs
from .._dist import __version__
from ..bounded_json import load_json_file
from ..errors import CodecIOError
from ..fs import is_regular_file
from ..model import names

if TYPE_CHECKING:
    from ..model.schema import FieldSpec, Schema

__all__ = [
    "CARD_FILES",
    "CARD_MARK",
    "ENTRY_KEYS",
    "MANIFEST",
    "VERSIONS",
    "card_files",
    "check_compression",
    "check_encodings",
    "check_entries",
    "check_listed_file",
    "check_shard_file",
    "check_shards",
    "foreign_files",
    "is_manifest_of",
    "is_own_card",
    "load_manifest",
    "manifest_base",
    "manifest_files",
    "manifest_schema",
]

MANIFEST = "dstore.json"
#: the hidden folder of a dataset's versions (:mod:`dstore.sharding.versions`): dstore's
#: own, whatever it holds
VERSIONS = ".dstore-versions"
#: the layout of the manifest (its keys and their values) this dstore writes and reads
FORMAT_VERSION = 1
#: the manifest entry of one shard, in the order it is written
ENTRY_KEYS = ("file", "records", "bytes", "sha256")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: The cards a dataset folder's root holds beside its data (:mod:`dstore.card`): Croissant
#: metadata, and the Hub's README.md for Parquet. dstore's own carry :data:`CARD_MARK`
#: near their start; only those count as the output's (``--overwrite`` replaces them),
#: a card of the user's stays theirs.
CARD_FILES = ("croissant.json", "README.md")
CARD_MARK = b"written by dstore"
#: how far into a card its mark is looked for
_CARD_MARK_WITHIN = 4096


def card_files(folder: str) -> set[str]:
    """The cards in ``folder``'s root that dstore wrote (regular files with its mark)."""
    found = set()
    for name in CARD_FILES:
        path = fs.join(folder, name)
        if is_regular_file(path):
            try:
                with fs.open_binary(path) as f:
                    if CARD_MARK in f.read(_CARD_MARK_WITHIN):
                        found.add(name)
            except OSError:
                continue
    return found


def is_own_card(path: str) -> bool:
    """True for a Croissant card dstore wrote (``croissant.json`` in a folder or
    ``<file>.croissant.json`` beside a file, with :data:`CARD_MARK`): metadata, never one
    of the files a folder or a glob of many files is read from."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    if not (name == CARD_FILES[0] or name.endswith("." + CARD_FILES[0])):
        return False
    if not is_regular_file(path):  # a FIFO is never opened to look (it would block)
        return False
    try:
        with fs.open_binary(path) as f:
            return CARD_MARK in f.read(_CARD_MARK_WITHIN)
    except OSError:
        return False


def manifest_base(format_id: str, compression: str | None) -> dict[str, Any]:
    """The keys every manifest starts with: which format, which dstore wrote it."""
    return {
        "format": format_id,
        "format_version": FORMAT_VERSION,
        "dstore_version": __version__,
        "compression": compression,
    }


def load_manifest(path: str) -> dict[str, Any]:
    """The manifest at ``path``, its shard list checked (:func:`check_entries`): names
    inside its folder, each listed once, positive record counts adding up to each
    split's count, sizes and sha256 of the right types.

    Raises :class:`~dstore.errors.CodecIOError` naming the file for anything else."""
    try:
        m = load_json_file(path, "manifest")
        if not isinstance(m, dict):
            raise CodecIOError(f"{path}: unreadable manifest: not a JSON object")
        root = path.rsplit("/", 1)[0] if fs.is_url(path) else (os.path.dirname(path) or ".")
        check_entries(path, root, m)
    except CodecIOError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CodecIOError(f"{path}: unreadable manifest: {e}") from None
    return m


def manifest_schema(m: Mapping[str, Any], path: str) -> Schema:
    """The schema the manifest ``m`` (loaded by :func:`load_manifest`: its shard counts add
    up to its splits') holds, refused unless it names the same splits with those counts."""
    from ..model.schema import Schema

    try:
        schema = Schema.from_json(m["schema"])
        counts = {split: int(info["count"]) for split, info in m["splits"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CodecIOError(f"{path}: unreadable manifest: {e}") from None
    if set(counts) != set(schema.splits):
        raise CodecIOError(
            f"{path}: splits of the schema, fields and shards disagree (corrupt manifest)"
        )
    for split, spec in schema.splits.items():
        if counts[split] != spec.count:
            raise CodecIOError(
                f"{path}: split {split!r}: its shards hold {counts[split]} records, its schema "
                f"{spec.count} (corrupt manifest)"
            )
    return schema


def check_compression(
    manifest: Mapping[str, Any], allowed: Collection[str | None], codec: str, path: str
) -> str | None:
    """The manifest's ``compression``, one of those ``allowed`` (whole-shard streams a
    format reads), else one line naming the manifest; its ``format_version`` must be
    the one this dstore writes (older manifests may lack it)."""
    version = manifest.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise CodecIOError(
            f"{path}: format_version {version!r}; this dstore reads {FORMAT_VERSION} (a newer "
            "dstore wrote it, or it is damaged)"
        )
    comp = manifest.get("compression")
    if comp not in allowed:
        shown = ", ".join(str(c).lower() for c in allowed)
        raise CodecIOError(f"{path}: compression {comp!r} is not one {codec} reads ({shown})")
    return comp


def check_encodings(
    schema: Schema,
    table: Mapping[str, Mapping[str, Any]],
    written: Callable[[FieldSpec], Collection[str] | None],
    codec: str,
    where: str,
) -> None:
    """Refuse a manifest storing a field in an encoding its format never writes for the
    field's kind (``written(spec)``: an int column called an image), which read on would
    be decoded as what it is not. ``table``: split -> field -> entry with ``encoding``."""
    for split, fields in table.items():
        for name, enc in fields.items():
            spec = schema.splits[split].fields[name]
            allowed = written(spec)
            if allowed is not None and enc.encoding not in allowed:
                raise CodecIOError(
                    f"{where}: split {split!r}, field {name!r}: encoding {enc.encoding!r} does "
                    f"not hold {spec.kind.describe()} ({codec} stores it as "
                    f"{' or '.join(sorted(allowed))}; corrupt manifest)"
                )


def check_entries(path: str, root: str, m: Mapping[str, Any]) -> None:
    """Refuse a manifest (at ``path``, its names relative to ``root``) that lists a file
    twice (as shard or index, under names equal but for case too: one file on macOS
    and Windows), names the manifest itself, or whose entries do not add up."""
    seen: dict[str, str] = {MANIFEST.casefold(): f"the manifest {MANIFEST}"}
    for split, info in m["splits"].items():
        total = 0
        for s in info["shards"]:
            entries = [("shard", s), *([("index", s["index"])] if "index" in s else [])]
            for role, entry in entries:
                _check_entry(path, root, entry, role)
                key = str(entry["file"]).casefold()
                if key in seen:
                    raise CodecIOError(
                        f"{path}: {role} {entry['file']} is listed twice (also as {seen[key]}); "
                        "each file is read once"
                    )
                seen[key] = f"{role} {entry['file']} of split {split!r}"
            records = s["records"]
            if isinstance(records, bool) or not isinstance(records, int) or records <= 0:
                # dstore never writes an empty shard
                raise CodecIOError(f"{path}: shard {s['file']} claims {records!r} records")
            total += records
        if total != int(info["count"]):
            raise CodecIOError(f"{path}: split {split!r}: shard counts do not add up")


def _check_entry(path: str, root: str, entry: Mapping[str, Any], role: str) -> None:
    """One shard's or index's entry: a name inside the folder, a size and a sha256."""
    name = entry["file"]
    if not isinstance(name, str):
        raise CodecIOError(f"{path}: a {role} entry's file is {name!r}, not a name")
    names.check_relative(root, name)  # never sends a reader outside its folder
    size, sha = entry["bytes"], entry["sha256"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CodecIOError(f"{path}: {role} {name}: bytes is {size!r}, not a size")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise CodecIOError(f"{path}: {role} {name}: sha256 is {sha!r}, not a sha256 digest")


def check_shard_file(path: str, entry: Mapping[str, Any]) -> None:
    """Refuse the file at ``path`` unless its size and sha256 are ``entry``'s (a manifest
    entry: ``bytes``, ``sha256``): a shard read whole, a downloaded copy (the shard
    cache calls this on each file it fetches)."""
    try:
        size, sha = fs.sha256_file(path)
    except FileNotFoundError:
        raise CodecIOError(f"{path}: missing (the manifest lists it)") from None
    except OSError as e:
        raise CodecIOError(f"{path}: cannot read: {e.strerror or e}") from None
    if size != entry["bytes"] or sha != entry["sha256"]:
        raise CodecIOError(
            f"{path}: {size} bytes with sha256 {sha[:16]}..., the manifest lists "
            f"{entry['bytes']} bytes with sha256 {str(entry['sha256'])[:16]}... (not this "
            "dataset's shard, or damaged)"
        )


def is_manifest_of(folder: str, format_id: str) -> bool:
    """True when ``folder`` holds a manifest of ``format_id`` (a regular file, JSON)."""
    manifest = fs.join(folder, MANIFEST)
    if not is_regular_file(manifest):
        return False
    try:
        m = load_json_file(manifest, "manifest")
    except OSError:  # CodecIOError too: too large, too deep, not JSON
        return False
    return isinstance(m, dict) and m.get("format") == format_id


def manifest_files(folder: str, format_id: str) -> set[str] | None:
    """The files a complete dataset of ``format_id`` at ``folder`` consists of (relative:
    the manifest, its shards and their record indexes), or None when ``folder`` holds
    no manifest of that format that dstore reads as a dataset (a bare format tag, a
    shard list that does not add up, a schema that does not parse)."""
    listed = _listed_bytes(folder, format_id)
    return None if listed is None else set(listed)


def _listed_bytes(folder: str, format_id: str) -> dict[str, int | None] | None:
    """:func:`manifest_files` with the size the manifest gives each shard and index
    (None for the manifest and the cards, which it does not size)."""
    from ..model.schema import Schema

    if not is_manifest_of(folder, format_id):
        return None
    try:
        m = load_manifest(fs.join(folder, MANIFEST))
        Schema.from_json(m["schema"])
        files: dict[str, int | None] = dict.fromkeys((MANIFEST, *card_files(folder)))
        for info in m["splits"].values():
            for shard in info["shards"]:
                for entry in (shard, *([shard["index"]] if "index" in shard else [])):
                    size = entry.get("bytes")
                    files[os.path.normpath(entry["file"])] = (
                        size if isinstance(size, int) and not isinstance(size, bool) else -1
                    )
    except (CodecIOError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return files


def foreign_files(folder: str, format_id: str, versions: bool = True) -> list[str]:
    """Files under ``folder`` (a dataset :func:`manifest_files` accepts; a local folder
    or an object-store prefix) that dstore did not write there: those its manifest
    does not list (a user's notes), and those it lists as a shard or index of another
    size than the file's (a manifest copied or forged over a user's files does not make
    them dstore's). ``versions``: the format keeps older versions in :data:`VERSIONS`
    (all dstore's); for one that never does, what that folder holds is a user's too."""
    listed = _listed_bytes(folder, format_id) or {}
    found = []

    def kept_apart(rel: str) -> bool:  # the versions' manifests and shards: all dstore's
        return versions and rel.split("/", 1)[0] == VERSIONS

    for rel, size in fs.files_under(folder, kept_apart):
        if rel not in listed or (listed[rel] is not None and size != listed[rel]):
            found.append(rel)
    return found


def check_shards(
    root: str, manifest: Mapping[str, Any], located: Mapping[str, str] | None = None
) -> list[tuple[bool, str]]:
    """Every shard the manifest lists, and its record index: present, of its size,
    with its sha256 (``located``: where each listed file lies, when not in ``root``)."""
    results: list[tuple[bool, str]] = []
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            files = [shard, *([shard["index"]] if "index" in shard else [])]
            results.extend(check_listed_file(root, f, split, located or {}) for f in files)
    return results


def check_listed_file(
    root: str, entry: Mapping[str, Any], split: str, located: Mapping[str, str] | None = None
) -> tuple[bool, str]:
    """One file a manifest entry lists (under ``root``, or where ``located`` says it
    lies), checked: ``(ok, what was found)``."""
    path = (located or {}).get(entry["file"]) or fs.join(root, entry["file"])
    if not fs.exists(path):
        return False, f"{entry['file']}: missing"
    size, sha = fs.sha256_file(path)
    if size != entry["bytes"] or sha != entry["sha256"]:
        return False, f"{entry['file']}: size or sha256 differs from the manifest"
    return True, f"{entry['file']}: {size} bytes, sha256 matches ({split})"
