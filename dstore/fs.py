"""Local paths and fsspec URLs (``s3://``, ``gs://``, ``memory://``) behind one set of calls.

Codecs that read or write through these helpers work on object storage with
no other change; fsspec (and s3fs for S3) is imported only when a URL is used.
"""

from __future__ import annotations

import glob as _glob
import hashlib
import os
import stat
from collections.abc import Callable
from typing import IO, Any

from .errors import MissingDependencyError

__all__ = [
    "create_exclusive",
    "exists",
    "getsize",
    "glob",
    "is_regular_file",
    "is_url",
    "isdir",
    "join",
    "listdir",
    "open_binary",
    "read_at",
    "sha256_file",
    "url_fs",
    "write_replacing",
]

#: reads from object storage fetch this much per request (sequential scans)
READ_BLOCK = 8 * 1024 * 1024


def is_url(path: str) -> bool:
    """fsspec-style URL (``s3://``, ``memory://``, ``file://``)."""
    return "://" in str(path)


def url_fs(url: str) -> tuple[Any, str]:
    """The fsspec filesystem and the path inside it."""
    try:
        import fsspec.core
    except ImportError:
        raise MissingDependencyError("URL", "s3", "fsspec") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as e:  # the protocol's package (s3fs, gcsfs) is missing
        protocol = url.split("://", 1)[0]
        if protocol in ("s3", "s3a"):
            raise MissingDependencyError(f"{protocol}://", "s3", "s3fs") from None
        # No extra of dstore installs gcsfs & co: fsspec's message names the package.
        raise MissingDependencyError(f"{protocol}:// URLs", None, str(e)) from None


def open_binary(path: str, mode: str = "rb") -> IO[bytes]:
    if not is_url(path):
        return open(path, mode)
    fs, p = url_fs(path)
    if "r" in mode:
        return fs.open(p, mode, block_size=READ_BLOCK, cache_type="readahead")
    return fs.open(p, mode)


def join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name if is_url(root) else os.path.join(root, name)


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    fs, p = url_fs(path)
    return bool(fs.exists(p))


def isdir(path: str) -> bool:
    if not is_url(path):
        return os.path.isdir(path)
    fs, p = url_fs(path)
    return bool(fs.isdir(p))


def listdir(path: str) -> list[str]:
    """Names (not paths) in a folder."""
    if not is_url(path):
        return os.listdir(path)
    fs, p = url_fs(path)
    return [str(e).rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(p, detail=False)]


def glob(pattern: str) -> list[str]:
    if not is_url(pattern):
        return _glob.glob(pattern)
    fs, p = url_fs(pattern)
    protocol = pattern.split("://", 1)[0]
    return [f"{protocol}://{m}" for m in fs.glob(p)]


def getsize(path: str) -> int:
    if not is_url(path):
        return os.path.getsize(path)
    fs, p = url_fs(path)
    return int(fs.size(p))


def sha256_file(path: str) -> tuple[int, str]:
    """Size in bytes and sha256 hex digest of one file, read in blocks."""
    sha = hashlib.sha256()
    size = 0
    with open_binary(path) as f:
        while block := f.read(READ_BLOCK):
            sha.update(block)
            size += len(block)
    return size, sha.hexdigest()


def files_under(
    folder: str, skip: Callable[[str], bool] | None = None
) -> list[tuple[str, int | None]]:
    """Every file under ``folder`` (a local folder, or an object-store prefix), sorted,
    relative (``/``-separated) with its size; a link is listed with size None, never
    followed. ``skip(rel)``: a local subfolder it is true of is not walked, and an
    object whose relative key it is true of is left out."""
    found: list[tuple[str, int | None]] = []
    if is_url(folder):
        fsys, root = url_fs(folder)
        root = root.rstrip("/")
        for path, info in sorted(fsys.find(root, detail=True).items()):
            rel = path[len(root) :].lstrip("/")
            if skip is None or not skip(rel):
                size = info.get("size")
                found.append((rel, size if isinstance(size, int) else None))
        return found
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        walked = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        if skip is not None:
            walked = [d for d in walked if not skip(_rel(os.path.join(root, d), folder))]
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = walked
        for name in sorted(files + links):
            path = os.path.join(root, name)
            st = os.lstat(path)
            found.append((_rel(path, folder), st.st_size if stat.S_ISREG(st.st_mode) else None))
    return found


def _rel(path: str, folder: str) -> str:
    return os.path.relpath(path, folder).replace(os.sep, "/")


def is_regular_file(path: str) -> bool:
    """A regular file (after symlinks) or an object: never a FIFO or device, whose
    opening could block or have effects."""
    if is_url(path):
        return exists(path) and not isdir(path)
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_at(path: str, offset: int, n: int) -> bytes:
    """Up to ``n`` bytes of a regular file from ``offset``; b"" when it cannot be read."""
    if not is_regular_file(path):
        return b""
    try:
        with open_binary(path) as f:
            f.seek(offset)
            return f.read(n)
    except OSError:
        return b""


#: fsspec filesystems whose ``pipe_file(mode="create")`` is one atomic create-if-absent
#: (S3's conditional PUT ``If-None-Match: *``; a dict in one process). fsspec's default
#: checks ``exists`` and then writes: two writers can both pass the check, so a store
#: not listed here offers no exclusive create and dstore says so instead of using it.
EXCLUSIVE_CREATE = ("s3fs.core.S3FileSystem", "fsspec.implementations.memory.MemoryFileSystem")


def offers_exclusive_create(path: str) -> bool:
    """True when a file can be created at ``path`` only if absent, atomically."""
    if not is_url(path):
        return True
    fs, _ = url_fs(path)
    return any(f"{c.__module__}.{c.__qualname__}" in EXCLUSIVE_CREATE for c in type(fs).__mro__)


def create_exclusive(path: str, data: bytes) -> None:
    """Create the file ``path`` holding ``data``, complete, only if nothing is there:
    :class:`FileExistsError` when something is (another writer won).

    Locally the bytes go to a temporary file, fsynced, then hard-linked to ``path``
    (``link`` fails on an existing name), so the file is never seen half written; on
    an object store, one conditional PUT (:data:`EXCLUSIVE_CREATE`)."""
    if is_url(path):
        if not offers_exclusive_create(path):
            raise NotImplementedError(f"{path}: this store offers no create-if-absent write")
        fs, p = url_fs(path)
        fs.pipe_file(p, data, mode="create")
        return
    _written_then(path, data, os.link)


def write_replacing(path: str, data: bytes) -> None:
    """Write ``path`` whole: readers see the old bytes or the new ones, never a mix
    (a temporary file renamed over it locally; one PUT on an object store)."""
    if is_url(path):
        fs, p = url_fs(path)
        fs.pipe_file(p, data)
        return
    _written_then(path, data, os.replace)


def _written_then(path: str, data: bytes, place: Any) -> None:
    """``data`` in a temporary file beside ``path``, fsynced, then ``place(tmp, path)``
    (``os.link``: only if absent; ``os.replace``: over it); the temporary file goes."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.part")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        place(tmp, path)
    finally:
        with _suppress_missing():
            os.remove(tmp)


def _suppress_missing() -> Any:
    import contextlib

    return contextlib.suppress(FileNotFoundError)
