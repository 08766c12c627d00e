"""Records of a local zarr array read straight from its chunk files, when each chunk is
one bare blosc frame (and, as dstore writes them, its CRC32C): what a map-style dataset
or a global shuffle asks for, a few records of many chunks at a time.

Through zarr, a record costs the decoding of its whole chunk (five photo tiles in
dstore's 1 MiB chunks) and a trip through zarr's event loop. Here a chunk file is read
once per call, checked (its size, its CRC32C, its blosc header against the size the
array's metadata declares), and only the blosc blocks that hold the records asked are
decoded, by c-blosc's own ``blosc_getitem`` in the library numcodecs loaded. Anything
else -- a URL or zip store, sharding, filters, another codec, a big-endian ``bytes``
codec, a chunk not stored (the fill value) -- reads through zarr as before."""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
from typing import Any

import numpy as np

from ... import fs
from ...abc import runs_of
from ...errors import CodecIOError

#: a blosc (c-blosc 1.x) frame's header: version, codec version, flags, typesize, then
#: the decoded size, the block size and the frame's own size (little-endian int32s)
_HEADER = 16
_FORMAT_VERSION = 2
_MEMCPYED = 0x2
_CRC_BYTES = 4
_MAX_FRAME = (1 << 31) - 1 - _HEADER


@functools.cache
def _blosc_getitem() -> Any:
    """c-blosc 1.x's ``blosc_getitem`` from the library numcodecs loaded, or None (another
    build, or c-blosc 2): then each chunk is decoded whole, still without zarr's trip.

    ``blosc_getitem`` decodes the blocks a byte range needs; it bounds every offset it
    reads by the frame size the header declares, which is checked against the bytes
    read before it is called."""
    import numcodecs.blosc as nb

    if not str(getattr(nb, "VERSION_STRING", "")).startswith("1."):
        return None
    try:
        fn = ctypes.CDLL(nb.__file__).blosc_getitem
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def _codec_chain(arr: Any) -> tuple[bool, bool] | None:
    """(blosc, crc32c) when every chunk of ``arr`` is a blosc frame of its little-endian
    (or one-byte) C-order values, followed by its CRC32C or not; None otherwise."""
    meta = arr.metadata
    one_byte = np.dtype(arr.dtype).itemsize == 1
    if getattr(meta, "zarr_format", 3) == 2:
        compressor = getattr(meta, "compressor", None)
        dtype = np.dtype(arr.dtype)
        ok = (
            getattr(compressor, "codec_id", None) == "blosc"
            and not meta.filters
            and getattr(meta, "order", "C") == "C"
            and (
                one_byte or dtype.byteorder == "<" or (dtype.byteorder == "=" and np.little_endian)
            )
        )
        return (True, False) if ok else None
    codecs = [c.to_dict() for c in meta.codecs]
    names = [c["name"] for c in codecs]
    if names not in (["bytes", "blosc"], ["bytes", "blosc", "crc32c"]):
        return None
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    if not (one_byte or endian == "little"):
        return None
    return True, names[-1] == "crc32c"


class DirectChunks:
    """One array's records read from its chunk files (see the module's docstring)."""

    def __init__(self, root: str, arr: Any, crc: bool) -> None:
        self.root, self.arr, self.crc = root, arr, crc
        self.folder = os.path.join(root, *arr.path.split("/"))
        self.rows = int(arr.chunks[0])
        self.count = int(arr.shape[0])
        self.dtype = np.dtype(arr.dtype).newbyteorder("<")
        self.record_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.chunk_bytes = self.rows * self.record_bytes

    @classmethod
    def of(cls, root: str, arr: Any, zipped: bool) -> DirectChunks | None:
        """The direct reader of ``arr`` in the store at ``root``, or None where zarr reads it."""
        if zipped or fs.is_url(root) or arr.ndim == 0 or getattr(arr, "shards", None):
            return None
        if np.dtype(arr.dtype).kind not in "biufc" or tuple(arr.chunks[1:]) != arr.shape[1:]:
            return None  # one chunk file per record-axis chunk, no strings
        chain = _codec_chain(arr)
        if chain is None or int(arr.chunks[0]) < 1 or 0 in arr.shape[1:]:
            return None
        direct = cls(root, arr, chain[1])
        # c-blosc 1.x counts a frame's bytes in int32s: a bigger chunk is zarr's to refuse
        return direct if direct.chunk_bytes <= _MAX_FRAME else None

    def _where(self, index: int) -> str:
        lo = index * self.rows
        hi = min(self.count, lo + self.rows) - 1
        return (
            f"{self.root}: array {self.arr.path!r}, chunk {self._key(index)!r} (records {lo}..{hi})"
        )

    def _key(self, index: int) -> str:
        return str(self.arr.metadata.encode_chunk_key((index, *(0,) * (self.arr.ndim - 1))))

    def frame(self, index: int) -> tuple[bytes, int, int] | None:
        """Chunk ``index``'s bytes, its blosc typesize and block size, checked; None when
        not stored."""
        path = os.path.join(self.folder, *self._key(index).split("/"))
        most = self.chunk_bytes + _HEADER + (_CRC_BYTES if self.crc else 0)
        try:
            with open(path, "rb") as f:
                data = f.read(most + 1)  # a bigger file is no frame of this chunk
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CodecIOError(f"{self._where(index)}: unreadable: {e}") from None
        size = len(data) - (_CRC_BYTES if self.crc else 0)
        if self.crc:
            import google_crc32c  # zarr's own dependency for its crc32c codec

            stored = int.from_bytes(data[size:], "little") if size >= 0 else -1
            if size < 0 or int(google_crc32c.value(data[:size])) != stored:
                raise CodecIOError(
                    f"{self._where(index)}: unreadable: its CRC32C does not match its bytes "
                    "(damaged or truncated)"
                )
        declared = int.from_bytes(data[12:16], "little") if size >= _HEADER else -1
        if declared != size:
            raise CodecIOError(
                f"{self._where(index)}: unreadable: its blosc frame declares {declared} "
                f"bytes, the file holds {size} (truncated or damaged)"
            )
        version, typesize = data[0], data[3]
        decoded = int.from_bytes(data[4:8], "little")
        blocksize = int.from_bytes(data[8:12], "little")
        if version != _FORMAT_VERSION or decoded != self.chunk_bytes or blocksize <= 0:
            raise CodecIOError(
                f"{self._where(index)}: unreadable: its blosc header (format {version}, "
                f"{decoded} bytes in blocks of {blocksize}) does not describe the chunk's "
                f"{self.chunk_bytes} bytes (damaged or written by another tool)"
            )
        return data, max(1, typesize), blocksize

    def read(self, wanted: np.ndarray) -> np.ndarray:
        """Records at sorted distinct positions ``wanted``, each chunk file read once."""
        out = np.empty((len(wanted), *self.arr.shape[1:]), self.dtype)
        if not len(wanted):
            return out.astype(np.dtype(self.arr.dtype), copy=False)
        flat = out.reshape(-1).view(np.uint8).reshape(len(wanted), self.record_bytes)
        chunk_of = wanted // self.rows
        cuts = [0, *(np.flatnonzero(np.diff(chunk_of)) + 1).tolist(), len(wanted)]
        for a, b in itertools.pairwise(cuts):
            index = int(chunk_of[a])
            offsets = wanted[a:b] - index * self.rows
            got = self.frame(index)
            if got is None:  # not stored: zarr reads the fill value
                lo = index * self.rows
                out[a:b] = np.asarray(self.arr[lo : lo + int(offsets[-1]) + 1])[offsets]
                continue
            self._decode(index, got, offsets, flat[a:b])
        return out.astype(np.dtype(self.arr.dtype), copy=False)

    def _decode(
        self, index: int, got: tuple[bytes, int, int], offsets: np.ndarray, dest: np.ndarray
    ) -> None:
        """Records ``offsets`` (sorted, of one chunk) of a checked frame into ``dest``."""
        data, typesize, blocksize = got
        runs = runs_of(offsets)
        getitem = _blosc_getitem()
        # blocks decoded run by run against all of them once (the whole chunk)
        blocks = sum(
            (b * self.record_bytes - 1) // blocksize - a * self.record_bytes // blocksize + 1
            for a, b in runs
        )
        whole = -(-self.chunk_bytes // blocksize)
        if getitem is None or self.record_bytes % typesize or blocks >= whole:
            import numcodecs.blosc as nb

            every = len(offsets) == self.rows  # the whole chunk, decoded in place
            chunk = dest if every else np.empty((self.rows, self.record_bytes), np.uint8)
            try:
                nb.decompress(
                    memoryview(data)[: len(data) - (_CRC_BYTES if self.crc else 0)], chunk
                )
            except Exception as e:  # noqa: BLE001 - numcodecs raises RuntimeError and others
                raise CodecIOError(f"{self._where(index)}: unreadable: {e}") from None
            if not every:
                dest[:] = chunk[offsets]
            return
        row = 0
        items = self.record_bytes // typesize
        for a, b in runs:
            n = getitem(data, a * items, (b - a) * items, dest[row].ctypes.data)
            if n != (b - a) * self.record_bytes:
                raise CodecIOError(
                    f"{self._where(index)}: unreadable: blosc could not decode its blocks "
                    f"(error {n})"
                )
            row += b - a
