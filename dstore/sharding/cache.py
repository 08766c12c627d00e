"""A bounded local cache of remote shard files (``to_torch(url, cache_dir=, cache_limit=)``).

Reading shards from object storage pays the network every epoch. With a cache
directory each shard is downloaded whole once (when one read spans several
shards, the next in the background while the current one is read), and later
epochs read the local copies.

What the cache may touch: only its own folder in ``cache_dir`` and the files
there that carry its names (:mod:`dstore.sharding.cache_folder`); a ``cache_dir``
that is, holds or lies inside the dataset's folder is refused.

What the cache trusts. A download is hashed as it streams in and must have the
size and sha256 the manifest lists, or it is refused; a rewritten dataset lists
other sha256s, so its shards have other keys and are downloaded again. A copy
is served when its ``stat`` is the one recorded after verification, else its
bytes are hashed again first (a copy replaced or edited since is downloaded
anew). A shard without a manifest entry (a folder dstore did not write) is
checked by size against the remote file each time it is used.

The limit. The folder holds at most ``limit`` bytes: copies and downloads in
progress count; the least recently used copies are deleted first. The copy a
process reads is never deleted by that process, so the bound is soft by one
shard per reading process. A download left by a process that died (SIGKILL,
a power cut) is deleted by the next process that uses the cache; on SIGTERM,
Ctrl-C or exit a process deletes its own downloads in progress.

Several DataLoader workers may share one directory: a download goes to a
temporary file in the folder and is renamed into place, so a reader sees a
whole shard or none, and two processes fetching the same shard both end up
with the same verified file.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import numbers
import operator
import os
import re
import stat
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .. import fs
from ..bounded_json import load_json
from ..errors import CodecIOError
from . import cache_folder as folder
from .cache_folder import FOLDER, TRIES, check_apart

if TYPE_CHECKING:
    from .reader import ShardFile

__all__ = ["FOLDER", "ShardCache", "check_apart", "parse_cache_limit"]

_CHUNK = 1 << 22
#: a shard's name keeps at most this many of its last characters in the copy's name
_NAME_TAIL = 100

# ------------------------------------------------------------------ the limit

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE_RE = re.compile(r"(?P<number>[0-9._]+(?:E[+-]?[0-9]+)?)\s*(?P<unit>(?:[KMGT]I?)?B)?")
#: limits above this are refused: no disk holds it, and None is the way to say "no bound"
MAX_LIMIT = 2**63 - 1


def parse_cache_limit(value: int | float | str | None) -> int | None:
    """``cache_limit`` in bytes: None (no bound), a whole number of bytes > 0 (an
    integer, numpy's included, or a float holding a whole number such as ``20e9``), or text such as ``"500MB"``,
    ``"2.5 GB"``, ``"20GiB"`` that makes a whole number of bytes.

    Everything else (``True``, ``1.5``, ``"inf"``, ``"1e400"``, ``0``) is a
    ``ValueError`` saying what a limit is."""
    if value is None:
        return None
    what = (
        "cache_limit is a whole number of bytes > 0, or text such as '500MB' or "
        f"'20GiB' (None: no bound); got {value!r}"
    )
    try:
        if isinstance(value, str):
            m = _SIZE_RE.fullmatch(value.strip().upper())
            if m is None:
                raise ValueError(what)
            number = Decimal(m["number"]) * _UNITS[m["unit"] or "B"]
        elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
            number = Decimal(operator.index(value))  # numpy's integers too
        elif isinstance(value, float):
            number = Decimal(value)  # a float's exact value: 1.5 stays 1.5
        else:
            raise ValueError(what)
        whole = number.is_finite() and number == number.to_integral_value()
    except ArithmeticError:  # "1..2", an exponent beyond Decimal's range
        raise ValueError(what) from None
    if not whole or number <= 0:
        raise ValueError(what)
    if number > MAX_LIMIT:
        raise ValueError(f"{what} (more than any disk holds; None is no bound)")
    return int(number)


# ------------------------------------------------------------------ the cache

_CACHES: weakref.WeakSet[ShardCache] = weakref.WeakSet()


@atexit.register
def _at_exit() -> None:
    for cache in list(_CACHES):
        cache._stop.set()  # a prefetch thread stops at its next block
    folder.remove_own_parts()


@dataclass(frozen=True)
class _Entry:
    key: str
    data: str  # the copy
    meta: str  # what it was verified against; its mtime is the last use


def _seal(st: os.stat_result) -> list[int]:
    """What changes when a file is replaced or written (ctime cannot be set back)."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


class ShardCache:
    """Verified local copies of remote shards in ``<cache_dir>/dstore-shard-cache``,
    at most ``limit`` bytes (:func:`parse_cache_limit`; None: unbounded)."""

    def __init__(self, cache_dir: str, limit: int | float | str | None = None) -> None:
        self.limit = parse_cache_limit(limit)
        self.directory = folder.own_folder(cache_dir)
        self._pending: dict[str, tuple[Future[int | None], threading.Thread]] = {}
        self._stop = threading.Event()
        _CACHES.add(self)
        folder.install_sigterm_cleanup()

    def entry(self, url: str, sha256: str | None) -> _Entry:
        """Where the copy of ``url`` with content ``sha256`` lives (its name ends with
        the shard's, so extensions such as ``.gz`` still tell)."""
        key = hashlib.sha256(f"{url}\0{sha256 or ''}".encode()).hexdigest()[:32]
        name = url.rsplit("/", 1)[-1][-_NAME_TAIL:]
        return _Entry(
            key,
            os.path.join(self.directory, f"{key}-{name}"),
            os.path.join(self.directory, f"{key}.json"),
        )

    @contextlib.contextmanager
    def pinned(self, url: str, size: int | None = None, sha256: str | None = None) -> Iterator[str]:
        """A local path holding ``url``'s bytes, verified against ``size`` and ``sha256``
        (the manifest's; None: the remote file's size), downloading it unless a
        verified copy is there; marks it as just used and keeps the cache within its
        limit. No process evicts the copy until the ``with`` block ends."""
        entry = self.entry(url, sha256)
        fd = self._pin(entry, url, size, sha256)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.utime(entry.meta)  # the last use orders eviction
            self._sweep(keep=entry.key)
            yield entry.data
        finally:
            os.close(fd)

    def local_slices(
        self, slices: list[tuple[ShardFile, int, int]]
    ) -> Iterator[tuple[ShardFile, int, int]]:
        """Shard slices ``(shard, lo, hi)`` with each shard read from its verified local
        copy (pinned until the next slice is asked for), the next one fetched while
        this one is read."""
        for i, (shard, lo, hi) in enumerate(slices):
            if i + 1 < len(slices):
                ahead = slices[i + 1][0]
                self.prefetch(ahead.path, ahead.size, ahead.sha256)
            with self.pinned(shard.path, shard.size, shard.sha256) as local:
                yield dataclasses.replace(shard, path=local), lo, hi

    def prefetch(self, url: str, size: int | None = None, sha256: str | None = None) -> None:
        """Start downloading ``url`` in the background (a daemon thread: exit never
        waits for it; the download it leaves is deleted then)."""
        entry = self.entry(url, sha256)
        if entry.key in self._pending or os.path.exists(entry.meta):
            return
        future: Future[int | None] = Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    fd = self._download_if_needed(entry, url, size, sha256)
                except BaseException as e:  # noqa: BLE001 - handed to pinned(), which raises it
                    future.set_exception(e)
                else:
                    future.set_result(fd)

        thread = threading.Thread(target=run, name="dstore-prefetch", daemon=True)
        self._pending[entry.key] = (future, thread)
        thread.start()

    def close(self) -> None:
        """Stop the downloads in the background (each deletes its part) and wait for them."""
        self._stop.set()
        for future, thread in self._pending.values():
            future.cancel()
            thread.join()
            if not future.cancelled() and future.exception() is None:
                _unpin(future.result())
        self._pending.clear()
        self._stop = threading.Event()

    # ------------------------------------------------------------ verified copies

    def _pin(self, entry: _Entry, url: str, size: int | None, sha256: str | None) -> int:
        """The pinned copy (an open descriptor, :func:`.cache_folder.pin`) of ``url``,
        checked or downloaded; the prefetched one when a prefetch fetched it."""
        pending = self._pending.pop(entry.key, None)
        # a failed prefetch raises here, as a direct download would
        fd = pending[0].result() if pending is not None else None
        if size is None and sha256 is None:
            size = fs.getsize(url)  # no manifest entry: the remote file's size is the check
        for _ in range(TRIES):
            if fd is None:
                fd = self._checked_pin(entry, url, size, sha256)
            if fd is None:
                self._sweep(keep=entry.key, incoming=size or 0)
                fd = self._download(entry, url, size, sha256)
            if fd is not None:
                return fd
        raise CodecIOError(
            f"{url}: its copy in {self.directory} was replaced {TRIES} times before it could "
            "be read (other processes keep fetching it); give the cache a larger cache_limit"
        )

    def _download_if_needed(
        self, entry: _Entry, url: str, size: int | None, sha256: str | None
    ) -> int | None:
        """A prefetch: the new copy, pinned, when there was no verified one (None: there
        is one)."""
        fd = self._checked_pin(entry, url, size, sha256)
        if fd is not None:
            os.close(fd)  # verified and sealed: pinned again when it is read
            return None
        self._sweep(keep=entry.key, incoming=size or 0)
        return self._download(entry, url, size, sha256)

    def _checked_pin(
        self, entry: _Entry, url: str, size: int | None, sha256: str | None
    ) -> int | None:
        """The copy pinned, when it is there and verified; else None."""
        _refuse_foreign(entry.data)
        fd = folder.pin(entry.data)
        if fd is None:
            return None
        try:
            ok = self._verified(entry, url, size, sha256)
        except BaseException:
            os.close(fd)
            raise
        if ok:
            return fd
        os.close(fd)
        return None

    def _verified(self, entry: _Entry, url: str, size: int | None, sha256: str | None) -> bool:
        """True when the copy is there and is what was asked for: its stat as sealed
        after verification, or else its bytes hashed again."""
        try:
            st = os.lstat(entry.data)
        except FileNotFoundError:
            return False
        meta = _read_meta(entry.meta)
        want = meta.get("sha256") if sha256 is None else sha256
        if meta.get("url") != url or want is None or meta.get("sha256") != want:
            return False
        if size is not None and (meta.get("bytes") != size or st.st_size != size):
            return False
        if meta.get("stat") == _seal(st):
            return True
        if fs.sha256_file(entry.data) != (meta.get("bytes"), want):
            return False  # replaced or edited since it was verified: downloaded anew
        _write_meta(self.directory, entry, {**meta, "stat": _seal(os.lstat(entry.data))})
        return True

    def _download(
        self, entry: _Entry, url: str, size: int | None, sha256: str | None
    ) -> int | None:
        """``url`` into a part, hashed as it streams in, checked, then renamed into place:
        the new copy, pinned; None when a reader pins a copy there already."""
        part = folder.new_part(self.directory, entry.key)
        fd = os.open(part, os.O_WRONLY)
        try:
            folder.lock(fd)  # held while it is written: other processes leave the part alone
            got = self._fill(fd, url, size, sha256)
            folder.share(fd)  # the lock becomes the new copy's pin
            if not folder.replace_unpinned(part, entry.data):
                os.close(fd)  # the pinned copy there is checked like any other
                return None
            st = os.fstat(fd)
            meta = {"url": url, "bytes": st.st_size, "sha256": got, "stat": _seal(st)}
            _write_meta(self.directory, entry, meta)
            return fd
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        finally:
            folder.forget_part(part)

    def _fill(self, fd: int, url: str, size: int | None, sha256: str | None) -> str:
        """The part open as ``fd`` written with ``url``'s bytes, hashed as they stream
        in; refused unless they have ``size`` and ``sha256``; returns their sha256."""
        digest, n = hashlib.sha256(), 0
        # a duplicate descriptor: closing it keeps the lock ``fd`` holds
        with os.fdopen(os.dup(fd), "wb") as out, fs.open_binary(url) as src:
            while chunk := src.read(_CHUNK):
                if self._stop.is_set():
                    raise CodecIOError(f"{url}: download stopped (the reader closed)")
                n += len(chunk)
                if size is not None and n > size:
                    break
                digest.update(chunk)
                out.write(chunk)
        got = digest.hexdigest()
        if (size is not None and n != size) or (sha256 is not None and got != sha256):
            raise CodecIOError(
                f"{url}: downloaded {'more than ' if size is not None and n > size else ''}"
                f"{n} bytes with sha256 {got[:16]}...; the manifest lists {size} bytes, "
                f"sha256 {str(sha256)[:16]}... (the shard changed since the manifest was "
                "written, or the download was damaged)"
            )
        return got

    # ------------------------------------------------------------ the limit

    def _sweep(self, keep: str, incoming: int = 0) -> None:
        """Delete downloads left by dead processes, then (with a limit) the least
        recently used copies but ``keep`` until the folder, with downloads in
        progress and ``incoming`` bytes to come, is within the limit."""
        entries: dict[str, list[Any]] = {}  # key -> [bytes, last use, files]
        total = incoming
        for name in folder.listdir(self.directory):
            path = os.path.join(self.directory, name)
            part = folder.PART_RE.fullmatch(name)
            m = part or folder.ENTRY_RE.fullmatch(name) or folder.META_RE.fullmatch(name)
            if m is None:
                continue  # not the cache's: never counted, never deleted
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # another process deleted it just now
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if part is not None:
                if folder.part_left_over(path, int(part["pid"]), st):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                else:
                    total += st.st_size  # a download in progress takes its room already
                continue
            held = entries.setdefault(m["key"], [0, 0, []])
            held[0] += st.st_size
            held[1] = max(held[1], st.st_mtime_ns)
            held[2].append(path)
        if self.limit is None:
            return
        total += sum(size for size, _, _ in entries.values())
        for key, (size, _, paths) in sorted(entries.items(), key=lambda kv: kv[1][1]):
            if total <= self.limit:
                break
            if key != keep and folder.evict(paths):  # a copy a reader pins stays
                total -= size


def _refuse_foreign(path: str) -> None:
    """A link, folder or FIFO with a copy's name was not written by the cache: refused."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise CodecIOError(
                f"{path}: in the shard cache's folder with the cache's name, but not a "
                "file it wrote (a link or a folder); remove it"
            )


def _unpin(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def _read_meta(path: str) -> dict[str, Any]:
    """An entry's record, or {} when it is missing or unreadable (then the copy is
    verified again or downloaded anew, never trusted)."""
    try:
        with open(path, "rb") as f:
            meta = load_json(f.read(1 << 16), path, "cache record")
    except OSError:  # a CodecIOError too: not JSON, nested too deeply
        return {}
    return meta if isinstance(meta, dict) else {}


def _write_meta(directory: str, entry: _Entry, meta: dict[str, Any]) -> None:
    tmp = folder.new_part(directory, entry.key)
    try:
        with open(tmp, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, entry.meta)
    finally:
        folder.forget_part(tmp)
