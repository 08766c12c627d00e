"""What a card says about a dataset's files and fields, gathered from its reader.

Every file is listed with its size and sha256. A sharded folder's manifest
already holds them; they are taken as they are only where dstore has just
written the shards (``trusted``: the conversion hashed the bytes it wrote);
otherwise every shard is hashed again and one that differs from its manifest
entry is an error naming it, not a card that vouches for it. A folder without
a shard list (a zarr store, one file per chunk) is described by its metadata
files (hashed) and one file set per top-level folder, whose chunk files are
not hashed one by one: the stored values' sha256 (``dstore check``) cover them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from .. import fs
from ..errors import CodecIOError
from ..model import Image
from ..model.schema import Schema
from ..sharding.manifest import card_files
from ..sources.unify import SOURCES_ATTR

__all__ = ["DataFile", "Facts", "gather"]

#: stored encodings that keep a field's records as encoded images
IMAGE_STORAGE = ("png", "jpeg", "webp", "jxl", "image")
#: metadata files a store folder keeps beside its chunks (zarr v3 and v2)
_STORE_METADATA = ("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata")


@dataclasses.dataclass(frozen=True)
class DataFile:
    """One file: its name relative to the card's folder, bytes, sha256, and the split it
    holds records of (None: the whole dataset's, as one npz file or a store's metadata)."""

    name: str
    bytes: int
    sha256: str
    split: str | None = None


@dataclasses.dataclass
class Facts:
    """The dataset a card describes, as stored."""

    #: the dataset's path (a folder or a file) and the folder the card is written in
    path: str
    card_dir: str
    #: the codec's registered name, its data files' media type, its capability flags
    format: str
    media_type: str | None
    hub_card: bool
    schema: Schema
    files: list[DataFile]
    #: split -> the files (names relative to ``card_dir``) holding its records, where known
    split_files: dict[str, list[str]]
    #: split -> the folder (relative) whose files hold its records (a store's group)
    split_dirs: dict[str, str]
    #: split -> field -> how its records are stored: a lossy image encoding (LossyImage),
    #: or the name of a stored encoding
    lossy: dict[str, dict[str, Any]]
    images: dict[str, set[str]]
    #: split -> field -> the format's record of how it is stored (a manifest's ``fields``)
    stored: dict[str, dict[str, Any]]
    manifest: dict[str, Any] | None
    #: True when dstore wrote the data files (``codec.owns``: its manifest, its schema)
    owned: bool = False
    #: data file name -> lines at its end that hold no record (``Codec.trailing_lines``)
    trailing: dict[str, int] = dataclasses.field(default_factory=dict)
    #: the field naming each record's file (many files read as one dataset), when its
    #: values are the files' names relative to the card
    source_field: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def encodings(self, split: str) -> dict[str, Any]:
        return self.stored.get(split, {})

    @property
    def is_folder(self) -> bool:
        return fs.isdir(self.path)

    @property
    def version(self) -> int:
        """The dataset's version (1 until it is appended to): its schema's last recorded
        version, else its manifest's."""
        history = getattr(self.schema, "versions", None) or []
        last = history[-1] if history and isinstance(history[-1], dict) else {}
        value = last.get("version", (self.manifest or {}).get("version", 1))
        return value if isinstance(value, int) and value > 0 else 1


def _relative(path: str, card_dir: str) -> str:
    if fs.is_url(path):
        return path[len(card_dir.rstrip("/")) + 1 :] if path.startswith(card_dir) else path
    return os.path.relpath(path, card_dir).replace(os.sep, "/")


def _hashed(path: str, card_dir: str, split: str | None) -> DataFile:
    size, sha = fs.sha256_file(path)
    return DataFile(_relative(path, card_dir), size, sha, split)


def _manifest_entries(manifest: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        entry["file"]: entry for info in manifest["splits"].values() for entry in info["shards"]
    }


def _shard_files(
    reader: Any, card_dir: str, trusted: bool
) -> tuple[list[DataFile], dict[str, list[str]]]:
    """The shards of a sharded folder (or file set), split by split, each checked against
    its manifest entry unless ``trusted``."""
    manifest, root = getattr(reader, "manifest", None), getattr(reader, "root", reader.path)
    listed = _manifest_entries(manifest) if manifest else {}
    files: list[DataFile] = []
    per_split: dict[str, list[str]] = {}
    for split, shards in reader.shards.items():
        for shard in shards:
            rel_root = _relative(shard.path, root)
            entry = listed.get(rel_root)
            if trusted and entry is not None:
                found = DataFile(
                    _relative(shard.path, card_dir), entry["bytes"], entry["sha256"], split
                )
            else:
                found = _hashed(shard.path, card_dir, split)
                if entry is not None and (found.bytes, found.sha256) != (
                    entry["bytes"],
                    entry["sha256"],
                ):
                    raise CodecIOError(
                        f"{shard.path}: size or sha256 differs from the manifest "
                        "(changed or corrupt: 'dstore check' says more); no card was written"
                    )
            files.append(found)
            per_split.setdefault(split, []).append(found.name)
    return files, per_split


def _store_files(
    folder: str, card_dir: str, splits: list[str]
) -> tuple[list[DataFile], dict[str, str]]:
    """A store folder: its metadata files hashed, each split's group folder as a set."""
    if fs.is_url(folder):  # an object store is not walked: each split's group is a set
        return [], {s: _relative(fs.join(folder, s), card_dir) for s in splits}
    ours = card_files(folder)
    files = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(root, name), folder)
            if name in _STORE_METADATA and rel not in ours:
                split = rel.split(os.sep, 1)[0] if os.sep in rel else None
                files.append(_hashed(os.path.join(root, name), card_dir, split))
    dirs_of = {
        s: _relative(os.path.join(folder, s), card_dir)
        for s in splits
        if os.path.isdir(os.path.join(folder, s))
    }
    return files, dirs_of


def _storage(
    reader: Any, schema: Schema
) -> tuple[dict[str, dict[str, Any]], dict[str, set[str]], dict[str, dict[str, Any]]]:
    """Per split: the lossy image encodings, the fields stored as encoded images, and the
    format's field encodings."""
    lossy: dict[str, dict[str, Any]] = {}
    images: dict[str, set[str]] = {}
    every: dict[str, dict[str, Any]] = {}
    encodings = getattr(reader, "encodings", None) or {}
    for split, spec in schema.splits.items():
        lossy[split] = dict(reader.lossy_fields(split))
        stored = encodings.get(split, {}) if isinstance(encodings, Mapping) else {}
        every[split] = dict(stored)
        images[split] = {
            name
            for name, f in spec.fields.items()
            if getattr(stored.get(name), "encoding", None) in IMAGE_STORAGE
            or (isinstance(f.kind, Image) and f.kind.encoding != "raw")
        }
    return lossy, images, every


def gather(
    reader: Any,
    path: str,
    card_dir: str,
    codec: Any,
    *,
    trusted: bool = False,
) -> Facts:
    """The facts of the dataset ``reader`` reads at ``path`` (``reader`` gives the values
    as stored: int8 codes, bfloat16 bits), for a card written in ``card_dir``."""
    schema: Schema = getattr(reader, "stored_schema", reader.schema)
    inner = _innermost(reader)
    split_dirs: dict[str, str] = {}
    source_field = None
    if isinstance(getattr(inner, "shards", None), Mapping):
        files, split_files = _shard_files(inner, card_dir, trusted)
    elif getattr(inner, "inputs", None):  # many files read as one dataset
        files = [_hashed(p, card_dir, None) for p in inner.inputs]
        split_files, source_field = _input_splits(schema, files)
    elif fs.isdir(path):
        files, split_dirs = _store_files(path, card_dir, list(schema.splits))
        split_files = {}
    else:
        files, split_files = [_hashed(path, card_dir, None)], {}
    lossy, images, stored = _storage(inner, schema)
    found = [(f.name, p) for f, p in zip(files, _paths(inner, path, files), strict=True)]
    trailing = {name: n for name, p in found if p and (n := codec.trailing_lines(p))}
    return Facts(
        path=path,
        card_dir=card_dir,
        format=codec.name,
        media_type=codec.media_type,
        hub_card=codec.hub_card,
        schema=schema,
        files=files,
        split_files=split_files,
        split_dirs=split_dirs,
        lossy=lossy,
        images=images,
        stored=stored,
        manifest=getattr(inner, "manifest", None),
        owned=bool(codec.owns(path)),
        trailing=trailing,
        source_field=source_field,
    )


def _input_splits(schema: Schema, files: list[DataFile]) -> tuple[dict[str, list[str]], str | None]:
    """Many files read as one dataset: per split, the files holding its records when
    they hold no other split's; and the field naming each record's file, when it names
    them as the card does."""
    held = schema.attrs.get(SOURCES_ATTR)
    if not isinstance(held, Mapping) or len(held.get("files", ())) != len(files):
        return {}, None
    counts = held.get("records", {})
    holds = [{s for s, n in counts.items() if n[i]} for i in range(len(files))]
    out = {
        split: [f.name for f, h in zip(files, holds, strict=True) if split in h]
        for split in schema.splits
        if all(h == {split} for h in holds if split in h)
    }
    named = list(held["files"]) == [f.name for f in files]
    return {s: names for s, names in out.items() if names}, held["field"] if named else None


def _paths(inner: Any, path: str, files: list[DataFile]) -> list[str | None]:
    """The local path of each data file of a file dataset, or None (a shard, a store's
    metadata: a file of lines is a whole dataset or one of many)."""
    if getattr(inner, "inputs", None):
        return [p if not fs.is_url(p) else None for p in inner.inputs]
    if len(files) == 1 and not fs.isdir(path) and not fs.is_url(path):
        return [path]
    return [None] * len(files)


def _innermost(reader: Any) -> Any:
    """The codec's own reader under any wrappers (decoded values, dropped fields): its
    shards, manifest and field encodings are the files'."""
    while getattr(reader, "inner", None) is not None:
        reader = reader.inner
    return reader
