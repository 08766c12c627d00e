"""A store's root metadata lists its nodes, so dstore's card sits in the store quietly.

zarr-python finds a group's members by listing the store, and warns of every object
there that is no zarr node, each time it lists ("Object at croissant.json is not
recognized as a component of a Zarr hierarchy"). With consolidated metadata in the
root ``zarr.json``, ``zarr.open_group``, its ``members()``/``arrays()`` and xarray
take the members from it and never list the store: the Croissant card
(``croissant.json``) can live in the store's root.

dstore writes the consolidated listing in the same write as the root group's
attributes (:func:`commit_root`): the commit of a conversion, of an append (whose
arrays grew), and of the mark an append sets first. So it always lists the arrays
as committed. dstore itself never trusts it: its reader and appender open every
node's own metadata (``use_consolidated=False``) through :class:`CardlessStore`,
whose listing of the root leaves dstore's card files out (no warning, and a node
can never be named like them: they are files).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import zarr
from zarr.storage import FsspecStore, LocalStore, WrapperStore

from ... import fs
from ...bounded_json import load_json
from ...errors import CodecIOError
from ...sharding.manifest import CARD_FILES
from .options import _ATTR, GROWING

__all__ = ["CardlessStore", "add_listing", "commit_root", "has_listing", "open_store"]

#: the metadata object a zarr node is known by (v3, then v2)
_NODE_KEYS = ("zarr.json", ".zgroup", ".zarray")
#: bytes of a root zarr.json read at most (its listing holds every node's metadata)
_META_MAX = 64 << 20


class CardlessStore(WrapperStore[Any]):
    """A store whose listing of the root leaves out dstore's card files (a file named
    ``croissant.json`` or ``README.md`` there, never a node's folder)."""

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        if prefix.strip("/"):
            return self._store.list_dir(prefix)
        return self._root_keys()

    async def _root_keys(self) -> AsyncIterator[str]:
        async for key in self._store.list_dir(""):
            if key in CARD_FILES and not await self._is_node(key):
                continue
            yield key

    async def _is_node(self, key: str) -> bool:
        for meta in _NODE_KEYS:
            if await self._store.exists(f"{key}/{meta}"):
                return True
        return False


def open_store(path: str, *, read_only: bool, inner: Any = None) -> CardlessStore:
    """The store at ``path`` (a folder or an fsspec URL; ``inner``: a store already
    open, as a zip store), its root listed without dstore's cards."""
    if inner is None:
        if fs.is_url(path):
            inner = FsspecStore.from_url(path, read_only=read_only)
        else:
            inner = LocalStore(path, read_only=read_only)
    return CardlessStore(inner)


def has_listing(path: str) -> bool:
    """True when the root ``zarr.json`` at ``path`` is a group's that dstore wrote (its
    schema in the attributes) holding consolidated metadata: zarr users' listings take
    the members from it, never from the store. A store of others' with a listing of its
    own is never written into."""
    meta = fs.join(path, "zarr.json")
    try:
        with fs.open_binary(meta) as f:
            node = load_json(f.read(_META_MAX), meta)
    except (OSError, CodecIOError):
        return False
    return (
        isinstance(node, dict)
        and node.get("node_type") == "group"
        and isinstance(node.get("consolidated_metadata"), dict)
        and isinstance(node.get("attributes"), dict)
        and _ATTR in node["attributes"]
    )


def commit_root(root: Any, attrs: Mapping[str, Any]) -> None:
    """One write of the root group's ``zarr.json``: ``attrs`` and the consolidated
    metadata of every node below it, read from each node's own metadata (``root`` is
    open without consolidated metadata, through :func:`open_store`). What
    ``zarr.consolidate_metadata`` writes, with the attributes in the same write: a
    store is never committed with a listing of another version's arrays."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.group import ConsolidatedMetadata, GroupMetadata
    from zarr.core.sync import sync

    members: dict[str, Any] = {}
    for key, node in root.members(max_depth=None, use_consolidated_for_children=False):
        meta = node.metadata
        if isinstance(meta, GroupMetadata):  # an empty group says so, as zarr's own does
            meta = dataclasses.replace(
                meta, consolidated_metadata=meta.consolidated_metadata or ConsolidatedMetadata({})
            )
        members[key] = meta
    ConsolidatedMetadata._flat_to_nested(members)
    metadata = dataclasses.replace(
        root.metadata,
        attributes=dict(attrs),
        consolidated_metadata=ConsolidatedMetadata(metadata=members),
    )
    for key, buffer in metadata.to_buffer_dict(default_buffer_prototype()).items():
        sync((root.store_path / key).set(buffer))


def add_listing(path: str) -> bool:
    """Give the local store at ``path`` the consolidated listing of its nodes, if dstore
    wrote it (its schema in the root attributes) and no append is under way: one write
    of the root ``zarr.json``, its attributes as they are, under the append lock. True
    once it has one. A store written before dstore wrote the listing gets it so."""
    if fs.is_url(path) or not os.path.isdir(path):
        return False
    from ...locking import append_lock

    try:
        with append_lock(path):
            store = open_store(path, read_only=False)
            root = zarr.open_group(store, mode="r+", zarr_format=3, use_consolidated=False)
            attrs = root.attrs.asdict()
            if _ATTR not in attrs or GROWING in attrs:
                return False  # not dstore's, or an append's records not committed
            commit_root(root, attrs)
    except (OSError, ValueError, KeyError, TypeError):  # zarr's errors are ValueErrors
        return False  # not a zarr v3 group, or not writable here: the card goes beside
    return True
