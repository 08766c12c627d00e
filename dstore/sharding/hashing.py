"""Counting and hashing the bytes of a shard as they are written, off the writing thread."""

from __future__ import annotations

import collections
import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

__all__ = ["_HashingFile"]


class _HashingFile:
    """Counts and sha256-hashes the bytes that reach the file.

    The hash runs on a thread of its own, in write order (hashlib lets go of the
    GIL on large buffers), so it overlaps the file write and the encoders instead
    of adding to the shard's critical path (issue #24: 17% of a conversion's main
    thread). Small writes are gathered into blocks first, so a format writing
    many small pieces does not pay a hand-off per piece. :attr:`sha` waits for
    the thread; close (or leave the ``with``) to stop it.
    """

    _BLOCK = 1 << 20  # bytes handed to the hashing thread at once, at least
    _AHEAD = 4  # blocks queued before write waits: bounds memory held for hashing

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.size = 0
        self._sha = hashlib.sha256()
        self._small = bytearray()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="dstore-sha256")
        self._pending: collections.deque[Future[None]] = collections.deque()

    def write(self, data: bytes) -> int:
        n = len(data)
        if n < self._BLOCK:
            self._small += data  # a copy: the caller may reuse its buffer
            if len(self._small) >= self._BLOCK:
                self._hash(bytes(self._small))
                self._small.clear()
        else:
            if self._small:
                self._hash(bytes(self._small))
                self._small.clear()
            self._hash(data if isinstance(data, bytes) else bytes(data))
        self.size += n
        return self.f.write(data)

    def _hash(self, block: bytes) -> None:
        self._pending.append(self._pool.submit(self._sha.update, block))
        while len(self._pending) > self._AHEAD:
            self._pending.popleft().result()

    @property
    def sha(self) -> Any:
        """The sha256 of every byte written so far (``hashlib``'s object)."""
        if self._small:
            self._hash(bytes(self._small))
            self._small.clear()
        while self._pending:
            self._pending.popleft().result()
        return self._sha

    def flush(self) -> None:
        self.f.flush()

    def tell(self) -> int:
        """Bytes written so far (a library writer's position: the file starts empty)."""
        return self.size

    @property
    def closed(self) -> bool:
        """Open while ``write_shard`` holds it (library writers such as pyarrow's ask)."""
        return False

    def close(self) -> None:
        """Stop the hashing thread (the file itself is its opener's to close)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> _HashingFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
