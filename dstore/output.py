"""Atomic outputs: write under a temporary name beside the destination, rename at the end.

A failure or Ctrl-C anywhere before the rename removes the temporary output,
so a destination is either absent, the previous complete output, or the new
complete output. Temporary names start with ``.<name>.dstore-tmp-`` so that
leftovers of a killed process are recognisable.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator

from .errors import CodecIOError, OutputExistsError, ResumableInterrupt
from .fs import is_url
from .fs import url_fs as _fs

__all__ = ["atomic_output", "path_size", "remove_path", "upload_output", "url_output"]

TMP_MARK = ".dstore-tmp-"


def path_size(path: str) -> int:
    """Bytes on disk of a file, or of every file under a directory (or URL)."""
    if is_url(path):
        fs, p = _fs(path)
        return int(fs.du(p, total=True)) if fs.exists(p) else 0
    if os.path.isdir(path):
        total = 0
        for root, _, files in os.walk(path):
            for f in files:
                with contextlib.suppress(OSError):
                    total += os.path.getsize(os.path.join(root, f))
        return total
    return os.path.getsize(path)


def remove_path(path: str) -> None:
    if is_url(path):
        fs, p = _fs(path)
        if fs.exists(p):
            fs.rm(p, recursive=True)
        return
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _same_or_nested(a: str, b: str) -> bool:
    a, b = os.path.realpath(a), os.path.realpath(b)
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


def _fsync_tree(path: str) -> None:
    paths = [path]
    if os.path.isdir(path):
        paths = [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]
        paths += [r for r, _, _ in os.walk(path)]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def check_destination(dst: str, sources: Iterable[str], overwrite: bool) -> str:
    """Refuse to write over an input, or over an existing output without ``overwrite``."""
    dst_abs = os.path.abspath(dst)
    for src in sources:
        if _same_or_nested(dst_abs, src):
            raise OutputExistsError(f"{dst}: the output would overwrite the input {src}")
    if os.path.lexists(dst_abs) and not overwrite:
        raise OutputExistsError(f"{dst}: already exists (use --overwrite to replace it)")
    parent = os.path.dirname(dst_abs)
    if not os.path.isdir(parent):
        raise CodecIOError(f"{dst}: folder {parent} does not exist")
    return dst_abs


@contextlib.contextmanager
def url_output(dst: str, *, sources: Iterable[str] = (), overwrite: bool = False) -> Iterator[str]:
    """Write straight to a URL: object stores have no rename, so this is not atomic;
    a failure removes what was written."""
    if any(os.path.abspath(str(s)) == dst or str(s) == dst for s in sources):
        raise OutputExistsError(f"{dst}: the output would overwrite the input")
    fs, p = _fs(dst)
    if fs.exists(p):
        if not overwrite:
            raise OutputExistsError(f"{dst}: already exists (use --overwrite to replace it)")
        fs.rm(p, recursive=True)
    try:
        yield dst
    except BaseException as e:
        try:
            remove_path(dst)
        except Exception as cleanup:  # noqa: BLE001 - the first error is the one to report
            e.add_note(f"the partial output at {dst} could not be removed: {cleanup}")
        raise


@contextlib.contextmanager
def upload_output(dst: str, *, sources: Iterable[str] = (), overwrite: bool = False) -> Iterator[str]:
    """For formats written only to local files (npz, HDF5): write in a local
    temporary folder, then upload. The object appears only after a complete
    upload; a failed upload raises and removes whatever part arrived."""
    import tempfile

    with url_output(dst, sources=sources, overwrite=overwrite):
        staging = tempfile.mkdtemp(prefix="dstore-upload-")
        try:
            local = os.path.join(staging, os.path.basename(dst.rstrip("/")))
            yield local
            fs, p = _fs(dst)
            try:
                fs.put(local, p, recursive=os.path.isdir(local))
            except Exception as e:  # noqa: BLE001 - botocore/aiohttp errors: named here, re-raised as ours
                raise CodecIOError(f"{dst}: upload failed: {type(e).__name__}: {e}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _writer_lock(parent: str, base: str, dst: str) -> Iterator[None]:
    """One dstore writer per destination: a second one fails clearly, never mixes."""
    lock = os.path.join(parent, f".{base}.dstore-lock")
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            try:
                with open(lock) as f:
                    pid = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and _pid_alive(pid):
                raise OutputExistsError(
                    f"{dst}: another dstore process (pid {pid}) is writing it"
                ) from None
            with contextlib.suppress(FileNotFoundError):
                os.remove(lock)  # left by a killed process
    else:
        raise OutputExistsError(f"{dst}: could not take the writer lock {lock}")
    try:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock)


def _stale(parent: str, base: str) -> list[str]:
    """Temporaries of earlier dstore processes that were killed, newest first."""
    found = []
    for mark in (TMP_MARK, ".dstore-old-"):
        prefix = f".{base}{mark}"
        for name in os.listdir(parent):
            if name.startswith(prefix):
                pid = name[len(prefix) :].split("-", 1)[0]
                if pid.isdigit() and not _pid_alive(int(pid)):
                    found.append(os.path.join(parent, name))
    return sorted(found, key=lambda p: os.lstat(p).st_mtime, reverse=True)


@contextlib.contextmanager
def atomic_output(
    dst: str,
    *,
    sources: Iterable[str] = (),
    overwrite: bool = False,
    resume: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """Yield a temporary path; on success rename it to ``dst``, on any failure delete it.

    Leftovers of killed runs are deleted -- except with ``resume``: the newest
    leftover temporary folder is then checked by ``resume(folder)`` (which
    raises if it cannot be continued, leaving it in place) and handed over as
    the temporary path, its contents kept."""
    dst_abs = check_destination(dst, sources, overwrite)
    parent, base = os.path.split(dst_abs)
    with _writer_lock(parent, base, dst):
        stale = _stale(parent, base)
        adopt = None
        if resume is not None:
            adopt = next((p for p in stale if TMP_MARK in p and os.path.isdir(p)), None)
            if adopt is not None:
                resume(adopt)
        for path in stale:
            if path != adopt:
                remove_path(path)
        check_destination(dst, sources, overwrite)  # again: another writer may have finished
        with _atomic_rename(dst_abs, parent, base, adopt) as tmp:
            yield tmp


@contextlib.contextmanager
def _atomic_rename(dst_abs: str, parent: str, base: str, adopt: str | None = None) -> Iterator[str]:
    tmp = os.path.join(parent, f".{base}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")
    if adopt is not None:
        os.replace(adopt, tmp)
    try:
        yield tmp
        if not os.path.lexists(tmp):
            raise CodecIOError(f"{dst_abs}: the writer produced no output")
        _fsync_tree(tmp)
        if os.path.lexists(dst_abs):
            old = os.path.join(parent, f".{base}.dstore-old-{os.getpid()}-{secrets.token_hex(4)}")
            os.replace(dst_abs, old)
            os.replace(tmp, dst_abs)
            remove_path(old)
        else:
            os.replace(tmp, dst_abs)
        fd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except ResumableInterrupt:
        raise  # the writer kept finished work in ``tmp`` for a resume
    except BaseException:
        remove_path(tmp)
        raise
