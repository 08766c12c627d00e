"""Checks of a zarr array's chunks before they are decoded (sizes, blosc frames, CRCs), and zarr's event loop kept quiet after a failed read."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np

from ... import fs
from ...errors import CodecIOError
from ...output import fmt_bytes
from ..arraytree.chunked import max_chunk_bytes, max_fill_bytes


def _ignore_orphaned_tasks(loop: Any, context: dict[str, Any]) -> None:
    """zarr reads a slice as one asyncio task per chunk: when one fails, the error
    reaches dstore (one line) and the others -- failed too, or still pending when the
    process exits -- would each print a traceback ("Task exception was never
    retrieved", "Task was destroyed but it is pending!"). They are the same failed read."""
    message = str(context.get("message", ""))
    if message.startswith(("Task exception was never retrieved", "Task was destroyed")):
        return
    loop.default_exception_handler(context)


def _quiet_zarr_loop() -> None:
    from zarr.core.sync import _get_loop

    loop = _get_loop()
    if loop.get_exception_handler() is None:
        loop.set_exception_handler(_ignore_orphaned_tasks)


def _settle_failed_read() -> None:
    """Wait for the chunk reads still running after one of them failed (zarr's gather
    returns at the first error and leaves the others running): left alone they end
    after the error line as tracebacks, or as "Event loop is closed" when the process
    exits. Waiting (not cancelling) leaves another thread's reads on zarr's loop intact."""
    import asyncio

    from zarr.core.sync import sync

    async def settle() -> None:
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.gather(*others, return_exceptions=True)

    with contextlib.suppress(Exception):  # only tidying after the error already raised
        sync(settle())


_ARRAY_METADATA = frozenset({"zarr.json", ".zarray", ".zattrs"})


def _stored_objects(arr: Any) -> int:
    """Chunk (or shard) objects the store holds for ``arr``: its keys, metadata aside."""
    from zarr.core.sync import sync

    store, path = arr.store_path.store, arr.store_path.path
    prefix = f"{path}/" if path else ""

    async def count() -> int:
        n = 0
        async for key in store.list_prefix(prefix):
            if key.rsplit("/", 1)[-1] not in _ARRAY_METADATA:
                n += 1
        return n

    return int(sync(count()))


def _check_chunks(arr: Any, where: str) -> None:
    """Refuse what the array's metadata declares beyond what reading it may cost: one
    chunk decoding to more than the per-chunk limit, or more than the fill limit of
    records in chunks it declares but does not store (zarr reads them as the fill value
    for as long as the declared shape says)."""
    itemsize = np.dtype(arr.dtype).itemsize
    chunk = int(np.prod(arr.chunks, dtype=object)) * itemsize
    limit = max_chunk_bytes()
    if chunk > limit:
        raise CodecIOError(
            f"{where}: one chunk {tuple(arr.chunks)} decodes to {fmt_bytes(chunk)}, more than "
            f"the per-chunk limit of {fmt_bytes(limit)} (a decompression bomb?); raise it with "
            f"the environment variable DSTORE_MAX_CHUNK_BYTES"
        )
    declared = int(np.prod(arr.shape, dtype=object)) * itemsize
    limit = max_fill_bytes()
    if declared <= limit:
        return  # however much of it is missing, reading it is cheap
    unit = tuple(arr.shards or arr.chunks)  # what the store holds one object per
    grid = int(
        np.prod(
            [-(-int(n) // max(1, int(c))) for n, c in zip(arr.shape, unit, strict=True)],
            dtype=object,
        )
    )
    missing = grid - min(grid, _stored_objects(arr))
    unstored = missing * int(np.prod(unit, dtype=object)) * itemsize
    if unstored > limit:
        raise CodecIOError(
            f"{where}: declares {fmt_bytes(declared)} in {grid:,} chunks but stores "
            f"{grid - missing:,} of them: {fmt_bytes(min(unstored, declared))} would be read as the "
            f"fill value, more than the limit of {fmt_bytes(limit)} (a size bomb?); raise it "
            f"with the environment variable DSTORE_MAX_FILL_BYTES"
        )


def _plain_blosc(arr: Any, root: str) -> bool:
    """Is ``arr`` a local, unsharded array whose chunks are bare blosc frames?"""
    if fs.is_url(root):
        return False
    meta = arr.metadata
    if getattr(meta, "zarr_format", 3) == 2:
        compressor = getattr(meta, "compressor", None)
        return getattr(compressor, "codec_id", None) == "blosc" and not meta.filters
    names = [c.to_dict()["name"] for c in meta.codecs]
    return bool(names) and names[-1] == "blosc"  # not crc32c, not sharding_indexed


def _check_frame(root: str, arr: Any, key: str, first: int, rows: int) -> None:
    path = os.path.join(root, *arr.path.split("/"), *key.split("/"))
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return  # not stored: read as the fill value (bounded by max_fill_bytes)
    with open(path, "rb") as f:
        header = f.read(16)
    declared = int.from_bytes(header[12:16], "little") if len(header) == 16 else -1
    if declared != size:
        last = min(int(arr.shape[0]), first + rows) - 1
        raise CodecIOError(
            f"{root}: array {arr.path!r}, chunk {key!r} (records {first}..{last}): "
            f"unreadable: its blosc frame declares {declared} bytes, the file holds {size} "
            "(truncated or damaged)"
        )
