"""Writing a zarr group: every array created at its final shape, then filled
chunk-aligned batch by batch, here or as regions on other processes (Dask)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCname, BloscCodec, BloscShuffle

from ...abc import Writer
from ...images.imagecodec import LossyImage
from ...model import (
    VarColumn,
    names,
)
from ...model.attrs import fill_value, group_attrs
from ...model.keys import stored_paths
from ...model.schema import Batch, Schema
from ...parallel import default_workers, ordered_map
from ..arraytree.chunked import (
    AlignedAppender,
    chunk_rows,
)
from .arrays import _BLOSC_SHUFFLE, _CRC, _json_attrs, _native, _VarArrays, _with_crc
from .consolidated import commit_root, open_store
from .imagecodec import zarr_codec  # registers the image codecs with zarr
from .options import _ATTR, ZarrOptions, lossy_fields

__all__ = ["ZarrWriter", "write_region"]


@dataclass(frozen=True)
class _Region:
    """One dense array of a store being written: where it is and how its chunks are
    encoded -- all a process (a Dask worker) needs to write chunk-aligned blocks of it
    with the bytes the writer itself would write."""

    store: str
    parts: tuple[str, ...]
    rows: int  # records per chunk
    fill: Any
    #: a local, unsharded array of records with no empty axis: chunk files written here
    direct: bool
    options: ZarrOptions
    lossy: LossyImage | None

    def open(self) -> Any:
        return zarr.open_array(self.store, path="/".join(self.parts), mode="r+", zarr_format=3)

    def chunk_writer(self) -> Callable[[int, np.ndarray], None]:
        """``write(start, records)``: one chunk's records, its file written directly.

        For a local, unsharded array the chunk file is exactly numcodecs' Blosc
        encoding of the (zero-padded) chunk and its CRC32C -- byte-identical to what
        zarr writes (tested) -- so zarr's per-chunk machinery can be skipped. A lossy image
        array's chunk is the image codec's encoding of its one image, which is what
        zarr's codec wrapper writes too."""
        arr = self.open()
        encoder: Any = (
            numcodecs.Blosc(
                cname=self.options.cname,
                clevel=self.options.clevel,
                shuffle=_BLOSC_SHUFFLE[self.options.shuffle],
                blocksize=0,
            )
            if self.lossy is None
            else zarr_codec(self.lossy)._codec
        )
        zeros = (0,) * (arr.ndim - 1)
        # The array's folder is resolved (symlinks followed) once; a chunk key only adds
        # plain components ("c" and indices, checked) below it. Resolving every chunk's
        # path took a dozen lstat calls under the GIL per chunk file.
        folder = names.safe_join(self.store, *self.parts)
        made: set[str] = set()

        def write(start: int, chunk: np.ndarray) -> None:
            if len(chunk) < self.rows:  # zarr stores edge chunks at full size, padded
                pad = np.full((self.rows - len(chunk), *chunk.shape[1:]), self.fill, chunk.dtype)
                chunk = np.concatenate([chunk, pad])
            key = arr.metadata.encode_chunk_key((start // self.rows, *zeros))
            names.check_relative(folder, key)
            target = os.path.join(folder, *key.split("/"))
            where = os.path.dirname(target)
            if where not in made:
                os.makedirs(where, exist_ok=True)
                made.add(where)
            with open(target, "wb") as f:
                f.write(_with_crc(encoder.encode(np.ascontiguousarray(chunk))))

        return write


def write_region(region: _Region, start: int, block: np.ndarray) -> None:
    """Write records ``start:start+len(block)`` of one array, a whole number of its
    chunks (or shards) from a chunk boundary; runs on a Dask worker."""
    if not region.direct:
        region.open()[start : start + len(block)] = block
        return
    write = region.chunk_writer()
    for i in range(0, len(block), region.rows):
        write(start + i, block[i : i + region.rows])


class ZarrWriter(Writer):
    """Writes a new store; with ``root`` (an open group), the splits of ``schema`` into
    it (new splits of a store being appended to, :mod:`.append`)."""

    def __init__(self, path: str, schema: Schema, options: ZarrOptions, root: Any = None) -> None:
        super().__init__(path, schema)
        self.options = options
        if root is None:
            root = zarr.open_group(open_store(path, read_only=False), mode="w-", zarr_format=3)
        self.root = root
        self._workers = default_workers()
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="dstore-zarr")
        self._pending: list[Future[None]] = []
        self._appenders: dict[tuple[str, str], AlignedAppender] = {}
        self._var: dict[tuple[str, str], _VarArrays] = {}
        self._regions: dict[tuple[str, str], _Region] = {}
        # the names were checked by ZarrOptions.validate; zarr's enums type them
        compressor = (
            BloscCodec(
                cname=BloscCname(options.cname),
                clevel=options.clevel,
                shuffle=BloscShuffle(options.shuffle),
            ),
            _CRC,
        )
        self._root_attrs, split_attrs = group_attrs(schema.attrs)
        self._fills: dict[tuple[str, str], Any] = {}
        self._lossy = lossy_fields(schema, options)
        # a split read from a store's root is written there again (stored_paths)
        self._paths = stored_paths(schema)
        for split in schema.splits.values():
            at_root = bool(split.fields) and all(
                "/" not in self._paths[(split.name, f)] for f in split.fields
            )
            # require: a nested split (a/b) may have created this group (a) already
            group = (
                self.root
                if at_root
                else self.root.require_group("/".join(names.split_parts(split.name)))
            )
            group.attrs.update(_json_attrs(split_attrs.get(split.name, {})))
            for spec in split.fields.values():
                at_name = self._paths[(split.name, spec.name)].rpartition("/")[2]
                if not spec.dense:
                    self._var[(split.name, spec.name)] = _VarArrays.create(
                        group, split.count, spec, compressor, at_name
                    )
                    continue
                fill = fill_value(spec.attrs, _native(spec.dtype))
                self._fills[(split.name, spec.name)] = 0 if fill is None else fill
                rows = chunk_rows(spec, split.count, int(options.chunk_mb * 1024 * 1024))
                lossy = self._lossy.get((split.name, spec.name))
                serializer: Any = "auto"
                if lossy is not None:  # one image per chunk, encoded by imagecodecs
                    rows, serializer = 1, zarr_codec(lossy)
                shards = None
                if options.shard_chunks > 0:
                    shards = (rows * options.shard_chunks, *(max(1, d) for d in spec.shape))
                arr = group.create_array(
                    at_name,
                    shape=(split.count, *spec.shape),
                    dtype=_native(spec.dtype),
                    chunks=(rows, *(max(1, d) for d in spec.shape)),
                    shards=shards,
                    # chunk files side by side (c.0.0.0), not a folder per index (c/0/0/0):
                    # with a chunk per image, three folders per chunk made creating them
                    # cost as much system time as writing them (issue #24)
                    chunk_key_encoding={"name": "default", "separator": "."},
                    serializer=serializer,
                    compressors=compressor if lossy is None else (_CRC,),
                    fill_value=self._fills[(split.name, spec.name)],
                    attributes=_json_attrs(spec.attrs.get("user", {})),
                    # every chunk is stored, even one of fill values: a chunk missing
                    # from a dstore store is damage, not data (see _check_allocated)
                    config={"write_empty_chunks": True},
                )
                region = _Region(
                    path,
                    tuple(self._paths[(split.name, spec.name)].split("/")),
                    rows,
                    self._fills[(split.name, spec.name)],
                    options.shard_chunks == 0 and "://" not in path and all(spec.shape),
                    options,
                    lossy,
                )
                self._regions[(split.name, spec.name)] = region
                store = self._direct_fn(region) if region.direct else self._store_fn(arr)
                self._appenders[(split.name, spec.name)] = AlignedAppender(
                    rows * (options.shard_chunks or 1), store
                )

    def _direct_fn(self, region: _Region) -> Any:
        """Encode whole chunks on all cores and write their files ourselves
        (:meth:`_Region.write_chunks`)."""

        write = region.chunk_writer()

        def store(pos: int, data: np.ndarray) -> None:
            blocks = (
                (pos + i * region.rows, data[i * region.rows : (i + 1) * region.rows])
                for i in range(-(-len(data) // region.rows))
            )
            for _ in ordered_map(lambda b: write(*b), blocks, self._pool, 2 * self._workers):
                pass

        return store

    def _store_fn(self, arr: Any) -> Any:
        def store(pos: int, data: np.ndarray) -> None:
            # Chunk-aligned slices never share a chunk, so writes can overlap:
            # the next batch is read and queued while zarr encodes this one.
            self._pending.append(
                self._pool.submit(arr.__setitem__, slice(pos, pos + len(data)), data)
            )
            while len(self._pending) > 1:
                self._pending.pop(0).result()

        return store

    def write_regions(self, submit: Callable[..., None]) -> None:
        """Every dense field's chunk-aligned blocks (whole chunks, or whole shards with
        ``shard_chunks``) go to ``submit(write_region, region, start, block)``: each can be
        written by another process, as this one would. The fields whose records vary stay
        here: where their values go depends on every record before."""
        for key, appender in self._appenders.items():
            region = self._regions[key]
            appender.store = functools.partial(submit, write_region, region)

    def write(self, split: str, batch: Batch) -> None:
        for name, data in batch.items():
            if isinstance(data, VarColumn):
                self._var[(split, name)].write(data)
                continue
            native = _native(data.dtype)
            self._appenders[(split, name)].append(data.astype(native, copy=False))

    def finish(self) -> None:
        """Every record written (the schema aside)."""
        for appender in self._appenders.values():
            appender.flush()
        for fut in self._pending:
            fut.result()
        self._pool.shutdown()

    def close(self) -> None:
        self.finish()
        schema = self.schema
        sums = schema.checksums
        if self._lossy and sums:
            # the checksums hash the values written; a lossy field reads back other values
            sums = {
                split: {n: d for n, d in fields.items() if (split, n) not in self._lossy}
                for split, fields in sums.items()
            }
            schema = Schema(schema.splits, schema.attrs, sums)
        # the commit: the attributes and the listing zarr users read (.consolidated)
        attrs = {**self.root.attrs.asdict(), **_json_attrs(self._root_attrs)}
        commit_root(self.root, {**attrs, _ATTR: schema.to_json()})

    def abort(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
