"""zarr v3 groups (blosc), and reading any zarr v2/v3 group, array or zip store.

Written layout: one group per split, one array per field, chunked along the
record axis (about ``chunk_mb`` per chunk), blosc zstd level 3 with byte
shuffle by default; the dstore schema sits in the root group's attributes.
Arrays are created at their final shape up front and filled chunk-aligned,
batch by batch. Reading walks groups: arrays in the root form the default
split (label-maker names like ``x_train`` map to splits), each sub-group is a
split.
"""

from __future__ import annotations

import os
import re
import zipfile

import numpy as np

from ... import fs
from ...abc import Codec, Reader, Writer
from ...bounded_json import load_json
from ...errors import CodecIOError, SchemaError
from ...fs import is_regular_file
from ...model import Bytes, Image, Ragged, String, StringList, Tensor, names
from ...model.attrs import for_zarr, target_notes
from ...model.schema import Schema
from ...sharding.manifest import card_files
from .consolidated import add_listing, has_listing
from .options import ZarrOptions, lossy_fields
from .reader import ZarrReader
from .writer import ZarrWriter

__all__ = ["ZarrCodec", "ZarrReader", "ZarrWriter"]


def _case_insensitive(path: str) -> bool:
    """Does the file system that will hold ``path`` fold case (macOS, Windows)? A probe
    folder beside it answers (object stores and unknown places: no)."""
    import tempfile

    parent = os.path.dirname(os.path.abspath(path))
    if fs.is_url(path) or not os.path.isdir(parent):
        return False
    probe = tempfile.mkdtemp(prefix=".dstore-case-probe-", dir=parent)
    try:
        head, tail = os.path.split(probe)
        return os.path.exists(os.path.join(head, tail.upper()))
    finally:
        os.rmdir(probe)


def _check_case_collisions(schema: Schema, path: str) -> None:
    """Refuse two names that differ only in case (fields ``x`` and ``X`` of one split)
    on a case-insensitive file system: each is a folder of the store, and there the
    second would be written into the first's folder -- one field lost without an
    error. Elsewhere they are two folders, as written before."""
    seen: dict[str, str] = {}
    clashes: list[tuple[str, str]] = []
    for split in schema.splits.values():
        stored = [names.split_parts(split.name)]
        stored += [names.field_path(split.name, f) for f in split.fields]
        for parts in stored:
            for n in range(1, len(parts) + 1):
                stored_at = "/".join(parts[:n])
                other = seen.setdefault(stored_at.casefold(), stored_at)
                if other != stored_at:
                    clashes.append((other, stored_at))
    if clashes and _case_insensitive(path):
        other, stored_at = clashes[0]
        raise SchemaError(
            f"zarr: {other!r} and {stored_at!r} differ only in case: as folders of one store "
            f"they collide on this case-insensitive file system; rename one"
        )


_METADATA = ("zarr.json", ".zgroup", ".zarray")
_META_MAX = 64 << 20  # more is not metadata zarr wrote


def _is_zarr_metadata(text: bytes) -> bool:
    try:
        meta = load_json(text, "zarr metadata")
    except CodecIOError:
        return False
    return isinstance(meta, dict) and meta.get("zarr_format") in (2, 3)


#: the other metadata files zarr v2 writes (v3 keeps everything in zarr.json)
_OTHER_METADATA = (".zattrs", ".zmetadata")
#: a chunk's key below its array's folder: v3 ``c/0/1`` or ``c.0.1`` (``c`` for a 0-d
#: array), v2 ``0.1`` or ``0/1``
_CHUNK_KEY = re.compile(r"c(?:[/.]\d+)*|\d+(?:[/.]\d+)*")


def _is_array_node(folder: str) -> bool | None:
    """True for a zarr array's folder (or object-store prefix), False for a group's,
    None for no zarr node."""
    if fs.is_regular_file(fs.join(folder, ".zarray")):
        return True
    if fs.is_regular_file(fs.join(folder, ".zgroup")):
        return False
    meta = fs.join(folder, "zarr.json")
    if not fs.is_regular_file(meta):
        return None
    try:
        with fs.open_binary(meta) as f:
            node = load_json(f.read(_META_MAX), meta)
    except OSError:  # a CodecIOError too: not JSON, nested too deeply
        return None
    return isinstance(node, dict) and node.get("node_type") == "array"


def _store_foreign_files(store: str) -> list[str]:
    """Files of a store folder (or object-store prefix) that are neither zarr metadata
    nor the chunk key of an array (relative to ``store``)."""
    found = []
    nodes: dict[str, bool | None] = {}
    for rel, _ in fs.files_under(store):
        parts = rel.split("/")
        if parts[-1] in _METADATA or parts[-1] in _OTHER_METADATA:
            continue
        # the nearest folder above that is a zarr node: the file is a chunk of it or not
        depth = len(parts) - 1
        while True:
            folder = "/".join(parts[:depth])
            if folder not in nodes:
                nodes[folder] = _is_array_node(fs.join(store, folder) if folder else store)
            if nodes[folder] is not None or depth == 0:
                break
            depth -= 1
        key = "/".join(parts[depth:])
        if not (nodes[folder] and _CHUNK_KEY.fullmatch(key)):
            found.append(rel)
    return found


class ZarrCodec(Codec):
    """zarr v3 groups with blosc compression; reads zarr v2 and v3."""

    name = "zarr"
    media_type = "https://zarr-specs.readthedocs.io/en/latest/v3/core/index.html"
    extensions = (".zarr", ".zarr.zip")
    supports_urls = True
    region_writes = True
    appends_in_place = True  # arrays grow; the root group's metadata commits (.append)
    kinds = (Tensor, String, Bytes, StringList, Ragged, Image)
    bfloat16_as = "uint16"  # zarr 3.1's dtype registry has no bfloat16
    Options = ZarrOptions

    def supports(self, dtype: np.dtype) -> bool:
        return dtype.kind in "biufc"

    @classmethod
    def owns(cls, path: str) -> bool:
        """A zarr group or array: a folder (or zip store) with zarr v3 ``zarr.json``
        or v2 ``.zgroup``/``.zarray`` metadata at its root."""
        if fs.isdir(path):
            for name in _METADATA:
                meta = fs.join(path, name)
                if is_regular_file(meta):
                    try:
                        with fs.open_binary(meta) as f:
                            return _is_zarr_metadata(f.read(_META_MAX))
                    except OSError:
                        return False
            return False
        if not is_regular_file(path):
            return False
        try:
            with fs.open_binary(path) as f, zipfile.ZipFile(f) as z:
                member_name = next((n for n in _METADATA if n in z.namelist()), None)
                if member_name is None:
                    return False
                with z.open(member_name) as member:
                    return _is_zarr_metadata(member.read(_META_MAX))
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
            return False

    @classmethod
    def foreign_files(cls, path: str) -> list[str]:
        """Files of a store folder that are neither zarr metadata nor chunk keys."""
        if not fs.isdir(path):
            return []
        cards = card_files(path)  # dstore's own cards, written with the store
        return [f for f in _store_foreign_files(path) if f not in cards]

    @classmethod
    def card_inside(cls, path: str, *, make_room: bool = False) -> bool:
        """zarr-python warns of every file in a store that is no zarr node, each time it
        lists a group, unless the root's consolidated metadata lists the nodes (which
        dstore writes with every commit): a store without it gets one with ``make_room``
        when dstore wrote it (:func:`.consolidated.add_listing`), else its card beside."""
        if has_listing(path):
            return True
        return make_room and add_listing(path)

    def open_reader(self, path: str) -> Reader:
        return ZarrReader(path, self.follow_links)

    def check_schema(self, schema: Schema) -> None:
        super().check_schema(schema)
        lossy_fields(schema, self.options)

    def open_writer(self, path: str, schema: Schema) -> Writer:
        self.check_schema(schema)
        names.check_tree(schema, self.name)  # before any byte: a raw h5py/zarr error otherwise
        _check_case_collisions(schema, path)
        return ZarrWriter(path, schema, self.options)

    def open_appender(self, path: str, schema: Schema, after: Schema) -> Writer:
        self.check_schema(schema)
        names.check_tree(schema, self.name)
        from .append import ZarrAppender

        return ZarrAppender(path, schema, after)

    def attribute_notes(self, schema: Schema) -> list[str]:
        return target_notes(schema, self.name, for_zarr)
