"""Versions of a sharded dataset folder: numbered manifests, each committed once.

A folder dstore converted is version 1, its manifest ``dstore.json``. An append
(or a compaction) writes its shards where no glob of the root finds them, into a
folder of its own, ``.dstore-versions/pending-<token>/``, and then commits the
next version by *creating* its manifest ``.dstore-versions/00000002.json`` -- only
if no other writer created it first: a hard link locally, a conditional PUT
(``If-None-Match: *``) on S3, as Delta Lake's log and Lance's manifests commit.
Until that file exists the version is invisible; once it exists it is complete.

Then the version is *settled*: its shards move into the root, shards that only
older versions list (a compaction's) move to ``.dstore-versions/superseded/``, and
``dstore.json`` and the version's other metadata files (:data:`METADATA_KEY`) are
rewritten as the latest version's. A process killed between the commit and the end
of the settling leaves a committed version whose files are partly in its pending
folder: readers find them there (:func:`locate`), and the next writer finishes the
moves (:func:`settle`) before anything else. At rest the root holds exactly the
latest version's shards, so ``glob('out/train-*')`` reads the latest version::

    dstore.json                 the latest version's manifest (a copy)
    train-00000-of-00002...     the latest version's shards, nothing else
    .dstore-versions/
        00000001.json ...       each version's manifest, written once, never changed
        pending-<token>/        an append being written (or killed before its commit)
        superseded/             shards of older versions that a compaction replaced
        pruned.json             the versions ``prune`` removed

Shard names are never reused while a version lists them (the engine numbers new
shards after the latest version's), so a name is one file wherever it lies.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import fs
from ..errors import AppendConflictError, AppendError, CodecIOError, VersionError
from ..locking import no_exclusive_create
from .manifest import MANIFEST, VERSIONS, load_manifest

__all__ = [
    "METADATA_KEY",
    "PENDING",
    "SUPERSEDED",
    "VERSIONS",
    "PendingVersion",
    "begin_version",
    "commit_version",
    "committed",
    "entry_files",
    "kept_names",
    "latest_version",
    "locate",
    "pruned_through",
    "remove_stale",
    "settle",
    "version_manifest",
]

SUPERSEDED = "superseded"
PENDING = "pending-"
PRUNED = "pruned.json"
#: the manifest key (``version``) holding what the container needs of a version: its
#: number, the pending folder its files were written in, the files a compaction
#: superseded, and ``metadata``: files written beside the manifest for this version
#: (a card), moved into the root with it
METADATA_KEY = "version"
_VERSION_FILE = re.compile(r"^(\d{8})\.json$")
#: a pending folder on an object store (no lock there) older than this is a killed
#: writer's, removed by the next append
STALE_SECONDS = 6 * 3600


def _dir(root: str) -> str:
    return fs.join(root, VERSIONS)


def version_file(root: str, number: int) -> str:
    return fs.join(_dir(root), f"{number:08d}.json")


def committed(root: str) -> list[int]:
    """The numbers of the committed version files, in order (none before the first append)."""
    folder = _dir(root)
    try:
        found = fs.listdir(folder) if fs.isdir(folder) else []
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for n in found if (m := _VERSION_FILE.match(n)))


def pruned_through(root: str) -> int:
    """The newest version ``prune`` removed (0: none)."""
    path = fs.join(_dir(root), PRUNED)
    if not fs.exists(path):
        return 0
    try:
        with fs.open_binary(path) as f:
            return int(json.loads(f.read())["through"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CodecIOError(f"{path}: unreadable: {e}") from None


def latest_version(root: str) -> tuple[int, str]:
    """The latest version's number and manifest path: the newest committed version
    file, or ``dstore.json`` of a folder never appended to (version 1)."""
    numbers = committed(root)
    if numbers:
        return numbers[-1], version_file(root, numbers[-1])
    return 1, fs.join(root, MANIFEST)


def version_manifest(root: str, number: int | None) -> tuple[int, str]:
    """The number and manifest path of version ``number`` (None: the latest); a version
    that does not exist or was pruned is one :class:`VersionError` line."""
    latest, path = latest_version(root)
    if number is None or number == latest:
        return latest, path
    if isinstance(number, bool) or not isinstance(number, int) or number < 1 or number > latest:
        raise VersionError(f"{root}: no version {number!r}; its versions are 1..{latest}")
    if number <= pruned_through(root):
        raise VersionError(
            f"{root}: version {number} was pruned (dstore prune); the oldest kept is "
            f"{pruned_through(root) + 1}"
        )
    if number not in committed(root):
        raise VersionError(f"{root}: version {number}'s manifest is missing from {VERSIONS}/")
    return number, version_file(root, number)


def entry_files(manifest: Mapping[str, Any]) -> list[str]:
    """Every file a manifest lists (shards and their record indexes), relative names."""
    out = []
    for info in manifest["splits"].values():
        for shard in info["shards"]:
            out.append(shard["file"])
            if "index" in shard:
                out.append(shard["index"]["file"])
    return out


def _pending_of(manifest: Mapping[str, Any]) -> str | None:
    meta = manifest.get(METADATA_KEY)
    return meta.get("pending") if isinstance(meta, Mapping) else None


def locate(root: str, rel: str, manifest: Mapping[str, Any], present: set[str]) -> str:
    """Where a file a version lists lies: in the root (``present``: the root's names,
    listed once), else superseded by a compaction, else still in the pending folder of
    the version that wrote it (committed, not yet settled)."""
    if _at_root(root, rel, present) or not fs.isdir(_dir(root)):
        return fs.join(root, rel)
    for folder in (SUPERSEDED, _pending_of(manifest)):
        if folder:
            candidate = fs.join(fs.join(_dir(root), folder), rel)
            if fs.exists(candidate):
                return candidate
    return fs.join(root, rel)  # missing: the reader names the root's path


def _at_root(root: str, rel: str, present: set[str]) -> bool:
    """Whether ``rel`` is in the root: one of its listed names, or (in a subfolder such
    as the record indexes') a file found there."""
    return rel in present if "/" not in rel else fs.exists(fs.join(root, rel))


@dataclass
class PendingVersion:
    """A version being written: its folder under ``.dstore-versions/`` and its base."""

    root: str
    folder: str
    token: str
    #: the version this one follows, and its manifest (as read when this one began)
    base: int
    base_manifest: dict[str, Any]

    @property
    def number(self) -> int:
        return self.base + 1


def begin_version(root: str, adopt: str | None = None) -> PendingVersion:
    """Start the next version of the folder at ``root``: the latest settled, its manifest
    read, and an empty pending folder (``adopt``: an interrupted one's, kept to resume).

    Locally the caller holds the append lock (:func:`dstore.locking.append_lock`)."""
    if not fs.offers_exclusive_create(version_file(root, 1)):
        raise AppendError(no_exclusive_create(root))
    base, path = latest_version(root)
    settle(root)
    manifest = load_manifest(path)
    if base == 1 and not committed(root) and len(manifest["schema"].get("versions", [])) > 1:
        raise CodecIOError(f"{root}: its manifest is of a later version but {VERSIONS}/ is gone")
    token = adopt or f"{PENDING}{os.getpid()}-{secrets.token_hex(6)}"
    folder = fs.join(_dir(root), token)
    if fs.is_url(folder):
        store, p = fs.url_fs(folder)
        store.makedirs(p, exist_ok=True)
    else:
        os.makedirs(folder, exist_ok=True)
    return PendingVersion(root, folder, token, base, manifest)


def commit_version(pending: PendingVersion, manifest: Mapping[str, Any]) -> None:
    """Commit ``manifest`` (whose files lie in the pending folder) as the next version:
    created only if no other writer committed that number first (then
    :class:`AppendConflictError`, and nothing of this version is kept); then settled."""
    root = pending.root
    if not committed(root):  # the first append: version 1's manifest joins the log, as it is
        with fs.open_binary(fs.join(root, MANIFEST)) as f:
            first = f.read()
        with contextlib.suppress(FileExistsError):
            fs.create_exclusive(version_file(root, 1), first)
    body = {**manifest, METADATA_KEY: {**manifest.get(METADATA_KEY, {}), "pending": pending.token}}
    # compact: the history and shard list grow with every version (the C encoder, ~20x
    # faster than an indented dump on a dataset of a thousand versions)
    data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
    try:
        fs.create_exclusive(version_file(root, pending.number), data)
    except FileExistsError:
        remove_tree(pending.folder)
        raise AppendConflictError(
            f"{root}: another writer committed version {pending.number} while this one was "
            "written; nothing of this one was kept: run it again to append after it"
        ) from None
    settle(root)


def _move(src: str, dst: str) -> None:
    """Move a file, tolerating another process having moved it already."""
    if fs.is_url(src):
        store, s = fs.url_fs(src)
        _, d = fs.url_fs(dst)
        with contextlib.suppress(FileNotFoundError):
            store.mv(s, d)
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.replace(src, dst)


def _names(folder: str) -> set[str]:
    try:
        return set(fs.listdir(folder)) if fs.isdir(folder) else set()
    except FileNotFoundError:
        return set()


def settle(root: str) -> None:
    """Finish the latest version's moves: its files into the root, the shards it
    supersedes out of it, ``dstore.json`` and its metadata files rewritten. Safe to run
    again, or by two processes at once (every step is a rename of a named file)."""
    numbers = committed(root)
    if not numbers:
        return
    path = version_file(root, numbers[-1])
    with fs.open_binary(path) as f:
        data = f.read()
    manifest = json.loads(data)
    meta = manifest.get(METADATA_KEY, {})
    pending = fs.join(_dir(root), meta.get("pending") or "-")
    present = _names(root)
    metadata = list(meta.get("metadata", []))
    for rel in [*entry_files(manifest), *metadata]:
        here = fs.join(pending, rel)
        if (rel in metadata or not _at_root(root, rel, present)) and fs.exists(here):
            _move(here, fs.join(root, rel))
    for rel in meta.get("superseded", []):
        if _at_root(root, rel, present):
            _move(fs.join(root, rel), fs.join(fs.join(_dir(root), SUPERSEDED), rel))
    top = fs.join(root, MANIFEST)
    current = b""
    with contextlib.suppress(FileNotFoundError), fs.open_binary(top) as f:
        current = f.read()
    if current != data:
        fs.write_replacing(top, data)
    remove_tree(pending, only_if_empty_files=True)


def remove_tree(folder: str, only_if_empty_files: bool = False) -> None:
    """Remove a pending folder (with ``only_if_empty_files``: only when no file is left
    in it, its empty subfolders aside)."""
    if fs.is_url(folder):
        store, p = fs.url_fs(folder)
        if not store.exists(p):
            return
        if only_if_empty_files and store.find(p):
            return
        with contextlib.suppress(FileNotFoundError):
            store.rm(p, recursive=True)
        return
    if not os.path.isdir(folder):
        return
    if only_if_empty_files and any(files for _, _, files in os.walk(folder)):
        return
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def remove_stale(root: str, keep: Iterable[str] = (), locked: bool = True) -> list[str]:
    """Remove the pending folders of appends that never committed (killed), but those in
    ``keep``. Under the local lock no other writer is running, so every such folder is
    stale; on an object store (no lock) only those older than :data:`STALE_SECONDS`."""
    folder = _dir(root)
    numbers = committed(root)
    live = set(keep)
    if numbers:
        with fs.open_binary(version_file(root, numbers[-1])) as f:
            live.add(_pending_of(json.loads(f.read())) or "")
    removed = []
    for name in sorted(_names(folder)):
        if not name.startswith(PENDING) or name in live:
            continue
        path = fs.join(folder, name)
        if not locked and not _older_than(path, STALE_SECONDS):
            continue
        remove_tree(path)
        removed.append(name)
    return removed


def kept_names(root: str) -> set[str]:
    """The names of the shards kept versions list: in the root or superseded (with the
    latest settled, every file of a kept version is in one of them)."""
    return _names(root) | _names(fs.join(_dir(root), SUPERSEDED))


def _older_than(path: str, seconds: float) -> bool:
    """Whether everything in a (remote) folder was last written over ``seconds`` ago."""
    store, p = fs.url_fs(path)
    try:
        stamps = [
            info.get("LastModified") or info.get("mtime") or info.get("created")
            for info in store.find(p, detail=True).values()
        ]
    except FileNotFoundError:
        return False
    newest = max(
        (s.timestamp() if hasattr(s, "timestamp") else float(s) for s in stamps if s), default=0
    )
    return time.time() - newest > seconds
