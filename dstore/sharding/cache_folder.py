"""What the shard cache (:mod:`dstore.sharding.cache`) may touch, and its clean-up.

It writes only in a folder of its own, ``<cache_dir>/dstore-shard-cache``
(marked with a ``CACHEDIR.TAG``), and counts, serves or deletes only the files
there that carry its names:

- ``<key>-<shard name>``: a shard's copy (``key``: 32 hex digits of the sha256
  of the shard's URL and of the sha256 its manifest lists);
- ``<key>.json``: what the copy was verified against (URL, size, sha256) and the
  copy's ``stat`` at that moment; its modification time is the entry's last use;
- ``.<key>.<pid>.<random>.part``: a download (or record) being written by process
  ``pid``, which holds an ``flock`` on it while it writes.

A reader pins the copy it reads (an open descriptor holding a shared ``flock``,
:func:`pin`) from before it is checked until the reader moves on to the next
shard; eviction (:func:`evict`) takes an exclusive lock without waiting and skips
a pinned copy, and a download replaces a copy only when no reader pins it
(:func:`replace_unpinned`). So DataLoader workers sharing one folder never delete
the copy another worker is about to open or is reading.

Anything else in ``cache_dir`` or in the folder is never read, counted or deleted,
and a ``cache_dir`` that is, holds or lies inside the dataset's folder is refused.

A part is left over when nobody holds its lock and its process is gone (or, its
pid taken by another process since, it has not been written for a minute): the
next process using the cache deletes it. A process deletes its own parts on
exit, on an exception (Ctrl-C included) and on SIGTERM (:func:`install_sigterm_cleanup`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import stat
import threading
import time
from typing import Any

from .. import fs
from ..output import _pid_alive

__all__ = [
    "ENTRY_RE",
    "FOLDER",
    "META_RE",
    "PART_RE",
    "TRIES",
    "check_apart",
    "evict",
    "forget_part",
    "install_sigterm_cleanup",
    "listdir",
    "lock",
    "new_part",
    "own_folder",
    "part_left_over",
    "pin",
    "remove_own_parts",
    "replace_unpinned",
    "share",
]

#: the folder the cache makes inside ``cache_dir``: the only place it writes or deletes
FOLDER = "dstore-shard-cache"
_TAG = "CACHEDIR.TAG"
_TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# dstore's shard cache (to_torch cache_dir=): dstore deletes its files here as it\n"
    "# needs room. Backup tools skip this folder (https://bford.info/cachedir/).\n"
)
ENTRY_RE = re.compile(r"(?P<key>[0-9a-f]{32})-.+")
META_RE = re.compile(r"(?P<key>[0-9a-f]{32})\.json")
PART_RE = re.compile(r"\.(?P<key>[0-9a-f]{32})\.(?P<pid>[0-9]+)\.[0-9a-f]+\.part")
#: a part no process locks and not written for this long is left over (its pid
#: taken by another process since); within it the lock and the pid decide
_PART_GRACE_S = 60.0


def check_apart(cache_dir: str, dataset_paths: list[str]) -> None:
    """Refuse a ``cache_dir`` that is, holds or lies inside a folder of the dataset's
    shards (local paths or ``file://`` URLs among ``dataset_paths``)."""
    cache = os.path.realpath(cache_dir)
    for path in dataset_paths:
        local = _local_path(path)
        if local is None:
            continue
        folder = os.path.realpath(local if os.path.isdir(local) else os.path.dirname(local))
        if os.path.commonpath([cache, folder]) in (cache, folder):
            raise ValueError(
                f"cache_dir={cache_dir!r} overlaps the dataset's folder {folder}: "
                "give the cache a folder of its own, apart from the dataset"
            )


def _local_path(path: str) -> str | None:
    """The local path behind ``path`` (a path, or a ``file://``/``local://`` URL)."""
    if not fs.is_url(path):
        return path
    filesystem, inner = fs.url_fs(path)
    protocols = filesystem.protocol
    on_disk = "file" in (protocols if isinstance(protocols, tuple) else (protocols,))
    return inner if on_disk else None


def own_folder(cache_dir: str) -> str:
    """``<cache_dir>/dstore-shard-cache``, made (with its CACHEDIR.TAG) if missing;
    refused if something else (a link, a file) has its name."""
    os.makedirs(cache_dir, exist_ok=True)
    folder = os.path.join(cache_dir, FOLDER)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder)
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise ValueError(
            f"cache_dir={cache_dir!r}: {folder} is not a folder the shard cache made (a link "
            "or a file has its name); the cache writes in that folder only"
        )
    tag = os.path.join(folder, _TAG)
    if not os.path.exists(tag):
        with contextlib.suppress(FileExistsError), open(tag, "x") as f:
            f.write(_TAG_TEXT)
    return folder


def listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


# ------------------------------------------------------------------ parts

#: parts this process is writing (a forked child inherits the set: the pid in each
#: name tells whose they are)
_PARTS: set[str] = set()


def new_part(folder: str, key: str) -> str:
    """A new empty part of this process for ``key``, listed for clean-up; the caller
    deletes it (or renames it into place) and calls :func:`forget_part`."""
    while True:
        path = os.path.join(folder, f".{key}.{os.getpid()}.{secrets.token_hex(6)}.part")
        _PARTS.add(path)  # first: a sweep in another thread must not take it for a leftover
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except BaseException as e:
            _PARTS.discard(path)
            if isinstance(e, FileExistsError):  # the token came twice: draw another
                continue
            raise
        return path


def forget_part(path: str) -> None:
    """``path`` is renamed into place or deleted: no more this process's to clean up."""
    _PARTS.discard(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def remove_own_parts() -> None:
    """Delete the parts this process is writing (on exit, on SIGTERM)."""
    for path in list(_PARTS):
        m = PART_RE.fullmatch(os.path.basename(path))
        if m and int(m["pid"]) == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(path)
    _PARTS.clear()


def lock(fd: int) -> bool:
    """Take a part's lock without waiting: False when another open of it holds it."""
    try:
        import fcntl
    except ImportError:  # no flock here: the pid and the age decide
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def share(fd: int) -> None:
    """Wait for a shared lock on ``fd`` (or turn this descriptor's exclusive lock into
    one): evictions and replacements leave the file alone while it is held."""
    try:
        import fcntl
    except ImportError:  # no flock here: a copy may vanish; the reader fetches it again
        return
    fcntl.flock(fd, fcntl.LOCK_SH)


def _same_file(fd: int, path: str) -> bool:
    """``path`` still names the file open as ``fd`` (not deleted or replaced since)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_ino, held.st_dev) == (st.st_ino, st.st_dev)


#: how often pinning, replacing or fetching or replacing tries again when another process replaced the file between
TRIES = 8
#: never follow a link out of the folder, never block opening a FIFO that took a copy's name
_OPEN = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def pin(path: str) -> int | None:
    """An open descriptor of the copy at ``path`` holding a shared lock (close it to
    unpin), or None when there is no copy."""
    for _ in range(TRIES):
        try:
            fd = os.open(path, _OPEN)
        except FileNotFoundError:
            return None
        try:
            share(fd)  # waits out an eviction or replacement holding it (a moment)
            if _same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # deleted or replaced while this waited: look again
    return None


def _locked_if_there(path: str) -> tuple[bool, int | None]:
    """An exclusive lock on the file at ``path`` without waiting: (False, None) when a
    reader pins it, (True, None) when there is none, else (True, its descriptor)."""
    for _ in range(TRIES):
        try:
            fd = os.open(path, _OPEN)
        except FileNotFoundError:
            return True, None
        if not lock(fd):
            os.close(fd)
            return False, None
        if _same_file(fd, path):
            return True, fd
        os.close(fd)
    return False, None


def evict(paths: list[str]) -> bool:
    """Delete an entry's files (its copy first, then its record) unless a reader pins
    the copy: False then, and nothing is deleted."""
    copies = [p for p in paths if not p.endswith(".json")]
    free, fd = _locked_if_there(copies[0]) if copies else (True, None)
    if not free:
        return False
    try:
        for path in [*copies, *(p for p in paths if p.endswith(".json"))]:
            with contextlib.suppress(FileNotFoundError):  # another process was first
                os.unlink(path)
    finally:
        if fd is not None:
            os.close(fd)
    return True


def replace_unpinned(src: str, dst: str) -> bool:
    """Rename ``src`` over ``dst`` unless a reader pins the file at ``dst``: False then
    (that reader checked it: the caller pins and checks it too)."""
    free, fd = _locked_if_there(dst)
    if not free:
        return False
    try:
        os.replace(src, dst)
    finally:
        if fd is not None:
            os.close(fd)
    return True


def part_left_over(path: str, pid: int, st: os.stat_result) -> bool:
    """A part nobody is writing any more: its lock is free and its process is gone
    (or, a pid taken again, it has not been written for a while)."""
    if pid == os.getpid():
        return path not in _PARTS
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        if not lock(fd):
            return False
    finally:
        os.close(fd)
    return not _pid_alive(pid) or time.time() - st.st_mtime > _PART_GRACE_S


def _on_sigterm(previous: Any) -> Any:
    def handle(signum: int, frame: Any) -> None:
        remove_own_parts()
        if callable(previous):
            previous(signum, frame)
        else:  # the default: die of SIGTERM as the process would have
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    handle.dstore_shard_cache = True  # type: ignore[attr-defined]
    return handle


def install_sigterm_cleanup() -> None:
    """Delete this process's parts on SIGTERM, then do what SIGTERM did before (the
    default: die of it; a handler: call it). Installed from the main thread only, and
    never over an ignored SIGTERM or one handled outside Python."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (None, signal.SIG_IGN) or getattr(previous, "dstore_shard_cache", False):
        return
    signal.signal(signal.SIGTERM, _on_sigterm(previous))
