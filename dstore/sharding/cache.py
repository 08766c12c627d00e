"""A bounded local cache of remote shard files (``to_torch(url, cache_dir=, cache_limit=)``).

Reading shards from object storage pays the network every epoch. With a cache
directory each shard is downloaded whole once, the next shard fetched in the
background while the current one is read, and later epochs read the local
copies. The directory holds at most ``limit`` bytes: the least recently used
shards are deleted first (a shard's modification time is its last use). The
shard being read is never deleted by its own process, so the bound is soft by
at most one shard per reading process; give the cache room for that.

Several DataLoader workers may share one directory: a download goes to a
temporary file in the directory and is renamed into place, so a reader sees
a whole shard or none, and two processes fetching the same shard both end up
with the same complete file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor

from .. import fs

__all__ = ["ShardCache"]

_PART = ".part"
_CHUNK = 1 << 22


class ShardCache:
    """Local copies of remote shards under ``directory``, at most ``limit`` bytes (None:
    unbounded)."""

    def __init__(self, directory: str, limit: int | None = None) -> None:
        if limit is not None and limit <= 0:
            raise ValueError(f"cache_limit must be > 0 bytes; got {limit}")
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.limit = limit
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[str]] = {}

    def local_name(self, url: str) -> str:
        """The cache file of ``url``: a digest of the whole URL (two datasets' shards of
        one name differ) then its file name (extensions such as ``.gz`` still tell)."""
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        return os.path.join(self.directory, f"{digest}-{url.rsplit('/', 1)[-1]}")

    def local(self, url: str) -> str:
        """A local path holding ``url``'s bytes, downloading it unless cached; marks it
        as just used and keeps the cache within its limit."""
        pending = self._pending.pop(url, None)
        path = pending.result() if pending is not None else self._fetch(url)
        if not os.path.exists(path):  # evicted by another reader since it came
            path = self._fetch(url)
        os.utime(path)  # the last use orders eviction
        self._evict(keep=path)
        return path

    def prefetch(self, url: str) -> None:
        """Start downloading ``url`` in the background (one at a time, in order)."""
        if url in self._pending or os.path.exists(self.local_name(url)):
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="dstore-prefetch")
        self._pending[url] = self._pool.submit(self._fetch, url)

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _fetch(self, url: str) -> str:
        path = self.local_name(url)
        if os.path.exists(path):
            return path
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=_PART, dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as out, fs.open_binary(url) as src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
            os.replace(tmp, path)  # whole or absent, whoever else fetches it
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path

    def _evict(self, keep: str) -> None:
        """Delete least recently used shards until the cache is within its limit."""
        if self.limit is None:
            return
        entries = []
        for name in os.listdir(self.directory):
            if name.endswith(_PART):
                continue
            path = os.path.join(self.directory, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:  # another process evicted it just now
                continue
            entries.append((st.st_mtime_ns, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.limit:
                break
            if path == keep:
                continue
            with contextlib.suppress(FileNotFoundError):  # another process was first
                os.unlink(path)
            total -= size
