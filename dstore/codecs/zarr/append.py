"""Appending to a zarr store in place: arrays grow, the root group's metadata commits.

zarr's own metadata is the commit: dstore's schema in the root group's attributes
holds each split's record count, and dstore reads that many records. An append

1. marks the store as growing (the root attributes' ``dstore_appending``), after
   cutting back what a killed append left (arrays longer than the committed
   counts, arrays of splits never committed, zarr's ``*.partial`` temporaries);
2. grows each array and writes the new records: whole new chunks, and the last
   partial chunk of each array rewritten whole (zarr writes a chunk to a temporary
   file and renames it, so a reader gets the old chunk or the new one, whose first
   records are the old ones); a new split's arrays are created as a conversion does;
3. commits: one write of the root group's metadata, the new schema in, the mark out,
   and the listing of the grown arrays zarr users read (:mod:`.consolidated`).

Until 3, a reader opening the store reads the committed counts (arrays may be
longer while the mark is there) and one that opened it before reads on as it was.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import numpy as np
import zarr

from ...abc import Writer
from ...errors import CodecIOError
from ...model import VarColumn
from ...model.keys import stored_paths
from ...model.schema import Batch, Schema
from .arrays import _native, _VarArrays
from .consolidated import commit_root, open_store
from .imagecodec import lossy_of
from .options import _ATTR, GROWING, ZarrOptions
from .writer import ZarrWriter

__all__ = ["GROWING", "ZarrAppender"]

_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")


def _stored_schema(root: Any, path: str) -> Schema:
    stored = root.attrs.get(_ATTR)
    if stored is None:
        raise CodecIOError(
            f"{path}: a zarr store dstore did not write (no stored schema); convert it to a "
            "dstore zarr store to append to it"
        )
    return Schema.from_json(stored)


def _options_of(root: Any, schema: Schema) -> ZarrOptions:
    """The blosc settings the store's dense arrays were written with (new splits get
    them too)."""
    for at in stored_paths(schema).values():
        node: Any = root.get(at)
        if isinstance(node, zarr.Array):
            for codec in getattr(node.metadata, "codecs", ()):
                conf: Any = codec.to_dict()
                if conf.get("name") == "blosc":
                    c: Any = conf.get("configuration", {})
                    return ZarrOptions(
                        cname=str(c.get("cname", "zstd")),
                        clevel=int(c.get("clevel", 3)),
                        shuffle=str(c.get("shuffle", "shuffle")),
                    )
    return ZarrOptions()


def repair(root: Any, path: str, schema: Schema) -> None:
    """Cut back what a killed append left: records after the committed counts, arrays
    of splits never committed, zarr's temporary ``*.partial`` files."""
    paths = stored_paths(schema)
    for (split, field), at in paths.items():
        count = schema.splits[split].count
        spec = schema.splits[split].fields[field]
        node = root[at]
        if spec.dense:
            if node.shape[0] > count:
                node.resize((count, *node.shape[1:]))
        else:
            _VarArrays.reopen(node, spec.kind, count, 0)
    _remove_uncommitted(root, "", set(paths.values()))
    if "://" not in path and os.path.isdir(path):
        for folder, _, files in os.walk(path):
            for name in files:
                if _PARTIAL.search(name):
                    os.remove(os.path.join(folder, name))


def _remove_uncommitted(group: Any, prefix: str, committed: set[str]) -> None:
    for name, member in list(group.members()):
        at = f"{prefix}{name}"
        if at in committed:
            continue
        if any(p.startswith(at + "/") for p in committed) and isinstance(member, zarr.Group):
            _remove_uncommitted(member, f"{at}/", committed)
        else:
            del group[name]


class _Grown:
    """Appends to one dense array from row ``start``: the first store fills the last
    partial chunk (one rewrite of it), every later one whole chunks."""

    def __init__(self, arr: Any, start: int, rows: int) -> None:
        self.arr, self.pos, self.rows = arr, start, rows
        self._tail: list[np.ndarray] = []
        self._held = 0

    def append(self, data: np.ndarray) -> None:
        self._tail.append(data)
        self._held += len(data)
        need = (-self.pos) % self.rows or self.rows
        if self._held >= need:
            block = np.concatenate(self._tail).astype(data.dtype, copy=False)
            whole = need + ((len(block) - need) // self.rows) * self.rows
            self._store(block[:whole])
            rest = block[whole:]
            self._tail, self._held = ([rest], len(rest)) if len(rest) else ([], 0)

    def _store(self, block: np.ndarray) -> None:
        if len(block):
            self.arr[self.pos : self.pos + len(block)] = block
            self.pos += len(block)

    def flush(self) -> None:
        if self._tail:
            self._store(np.concatenate(self._tail).astype(self._tail[0].dtype, copy=False))
            self._tail, self._held = [], 0


class ZarrAppender(Writer):
    """Adds the records of ``schema`` (as stored) to the store at ``path``; ``close``
    commits ``after``, the store's schema once they are in (see the module doc)."""

    def __init__(self, path: str, schema: Schema, after: Schema) -> None:
        super().__init__(path, schema)
        self.after = after
        # every node's own metadata, never the root's listing of them (.consolidated)
        store = open_store(path, read_only=False)
        self.root = zarr.open_group(store, mode="r+", zarr_format=3, use_consolidated=False)
        stored = _stored_schema(self.root, path)
        if GROWING in self.root.attrs:
            repair(self.root, path, stored)
        mark = {GROWING: {"pid": os.getpid(), "time": time.time()}}
        commit_root(self.root, {**self.root.attrs.asdict(), **mark})  # lists what is committed
        paths = stored_paths(stored)
        self._dense: dict[tuple[str, str], _Grown] = {}
        self._var: dict[tuple[str, str], _VarArrays] = {}
        fresh = {n: s for n, s in schema.splits.items() if n not in stored.splits}
        self._new = (
            ZarrWriter(
                path, Schema(fresh, dict(after.attrs)), _options_of(self.root, stored), self.root
            )
            if fresh
            else None
        )
        for name, split in schema.splits.items():
            if name in fresh:
                continue
            count = stored.splits[name].count
            for field, spec in split.fields.items():
                node: Any = self.root[paths[(name, field)]]
                if spec.dense:
                    node.resize((count + split.count, *node.shape[1:]))
                    rows = int((node.shards or node.chunks)[0])  # whole shard files, if sharded
                    self._dense[(name, field)] = _Grown(node, count, rows)
                else:
                    self._var[(name, field)] = _VarArrays.reopen(
                        node, spec.kind, count, split.count
                    )

    def write(self, split: str, batch: Batch) -> None:
        if self._new is not None and split in self._new.schema.splits:
            self._new.write(split, batch)
            return
        for name, data in batch.items():
            if isinstance(data, VarColumn):
                self._var[(split, name)].write(data)
            else:
                self._dense[(split, name)].append(data.astype(_native(data.dtype), copy=False))

    def close(self) -> None:
        for grown in self._dense.values():
            grown.flush()
        if self._new is not None:
            self._new.finish()
        lossy = {k for k, g in self._dense.items() if lossy_of(g.arr) is not None}
        lossy |= set(self._new._lossy) if self._new is not None else set()
        record = self.after.versions[-1] if self.after.versions else {}
        for split, field in lossy:  # their values read back otherwise: no checksum
            record.get("checksums", {}).get(split, {}).pop(field, None)
        attrs = {k: v for k, v in self.root.attrs.asdict().items() if k != GROWING}
        attrs[_ATTR] = self.after.to_json()
        commit_root(self.root, attrs)  # the commit: one write of the root group's metadata

    def abort(self) -> None:
        if self._new is not None:
            self._new.abort()
