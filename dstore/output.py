"""Atomic outputs: write under a temporary name beside the destination, rename at the end.

A failure or Ctrl-C anywhere before the rename removes the temporary output,
so a destination is either absent, the previous complete output, or the new
complete output. Temporary names start with ``.<name>.dstore-tmp-`` so that
leftovers of a killed process are recognisable.

``overwrite=True`` replaces only what the target codec recognises as its own
output (``Codec.owns``: an npz zip of ``.npy`` members, an HDF5 signature, a
zarr store, a TFRecord folder with dstore's manifest); anything else -- a
folder of other files, a symlink, a FIFO, the working, home or root folder --
is refused before a byte is written and is never touched. A regular file is
replaced by one atomic rename. A folder is renamed aside to
``.<name>.dstore-old-<pid>-*`` and then deleted; if that deletion fails part-way
(an immutable file), the new output stays in place and :class:`OldOutputLeftError`
names the leftover, and every later run to that destination retries the
deletion and reports it again while it fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Literal

from .errors import CodecIOError, OldOutputLeftError, OutputExistsError, ResumableInterrupt
from .fs import is_url
from .fs import url_fs as _fs

if TYPE_CHECKING:
    from .abc import Codec

__all__ = [
    "Overwrite",
    "atomic_output",
    "check_room",
    "fmt_bytes",
    "path_size",
    "remove_path",
    "upload_output",
    "url_output",
]

#: ``overwrite``: False (refuse), True (replace a dataset of the target format whole, but
#: refuse one holding files the format did not write), "foreign" (replace those too)
Overwrite = bool | Literal["foreign"]

TMP_MARK = ".dstore-tmp-"
OLD_MARK = ".dstore-old-"


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
    """Remove a file, a symlink (never its target) or a folder tree, as far as possible."""
    if is_url(path):
        fs, p = _fs(path)
        if fs.exists(p):
            fs.rm(p, recursive=True)
        return
    _remove_local(path)


def _remove_local(path: str) -> OSError | None:
    """Remove ``path`` (a folder with everything under it; symlinks are removed, not
    followed); the first error if something could not be removed."""
    if not os.path.isdir(path) or os.path.islink(path):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            return e
        return None
    errors: list[tuple[str, BaseException]] = []
    # A writer that has not noticed the failure yet (a Dask worker) may add a file
    # between rmtree's listing and its rmdir: try again while that is the only
    # error. Once the folder is gone nothing recreates it (writers never create
    # the output root).
    for _ in range(20):
        errors.clear()
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=lambda _f, p, e: errors.append((p, e)))
        else:
            shutil.rmtree(path, onerror=lambda _f, p, info: errors.append((p, info[1])))
        if not os.path.lexists(path):
            return None
        if not all(isinstance(e, OSError) and e.errno == errno.ENOTEMPTY for _, e in errors):
            break
    for where, err in errors:
        if isinstance(err, OSError):
            err.filename = where  # rmtree names files relative to an open folder
            return err
    return OSError(errno.ENOTEMPTY, "could not be removed", path)


def _describe(e: OSError) -> str:
    where = f" ({e.filename})" if e.filename else ""
    return f"{type(e).__name__}: {e.strerror or e}{where}"


def _same_or_nested(a: str, b: str) -> bool:
    a, b = os.path.realpath(a), os.path.realpath(b)
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


#: Threads fsyncing a folder's files at once
_FSYNC_THREADS = 16


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: str) -> None:
    """Every file of ``path``, then every folder, on stable storage before the rename.

    A zarr store holds a file per chunk (thousands): fsynced one after another
    each waits for its own journal commit (3,000 chunk files: 2-3 s, as long as
    writing them), fsynced from several threads at once (``os.fsync`` releases
    the GIL) the file system commits them together (0.4-0.7 s)."""
    if not os.path.isdir(path):
        _fsync(path)
        return
    walked = list(os.walk(path))
    files = [os.path.join(r, f) for r, _, fs in walked for f in fs]
    folders = [r for r, _, _ in walked]
    if len(files) + len(folders) < 2 * _FSYNC_THREADS:
        for p in files + folders:
            _fsync(p)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(_FSYNC_THREADS, thread_name_prefix="dstore-fsync") as pool:
        for batch in (files, folders):  # the folders once their files are done
            for _ in pool.map(_fsync, batch):
                pass


def _already_exists(dst: str) -> OutputExistsError:
    return OutputExistsError(f"{dst}: already exists (pass overwrite=True to replace it)")


def _not_ours(dst: str, what: str) -> OutputExistsError:
    return OutputExistsError(f"{dst}: {what}; refusing to replace it (nothing was touched)")


def _check_foreign(dst: str, codec: Codec, overwrite: Overwrite) -> None:
    """Refuse a dataset holding files ``codec`` did not write, unless ``overwrite="foreign"``."""
    if overwrite == "foreign":
        return
    foreign = codec.foreign_files(dst)
    if foreign:
        shown = ", ".join(repr(f) for f in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        what = f"holds files {codec.name} did not write ({shown}{more}); refusing to replace it"
        raise OutputExistsError(
            f"{dst}: {what} (pass overwrite='foreign' to delete them too; nothing was touched)"
        )


def check_replaceable(dst: str, codec: Codec | None, overwrite: Overwrite = True) -> None:
    """Raise unless the existing ``dst`` is recognisably an output of ``codec`` holding
    only files it wrote (or ``overwrite="foreign"``)."""
    name = codec.name if codec is not None else "dstore"
    if is_url(dst):
        if codec is None or not codec.owns(dst):
            raise _not_ours(dst, f"exists and is not a dataset in {name} format")
        _check_foreign(dst, codec, overwrite)
        return
    dst_abs = os.path.abspath(dst)
    if os.path.islink(dst_abs):  # replacing the link would leave its target as it is, but
        # the user may think they name the target: say so rather than guess
        raise _not_ours(dst, f"is a symbolic link (to {os.readlink(dst_abs)})")
    real = os.path.realpath(dst_abs)
    cwd = os.path.realpath(os.getcwd())
    if (
        real in (os.path.realpath(os.sep), os.path.realpath(os.path.expanduser("~")))
        or cwd == real
        or cwd.startswith(real + os.sep)
        or os.path.ismount(real)
    ):
        raise _not_ours(dst, "is the root, home or working folder (or a mount point)")
    mode = os.lstat(dst_abs).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise _not_ours(dst, "is not a regular file or folder")
    if codec is None or not codec.owns(dst_abs):
        raise _not_ours(dst, f"exists and is not a dataset in {name} format")
    _check_foreign(dst_abs, codec, overwrite)


def check_destination(
    dst: str, sources: Iterable[str], overwrite: Overwrite, codec: Codec | None = None
) -> str:
    """Refuse to write over an input, over an existing output without ``overwrite``,
    or over anything that is not an output of ``codec``."""
    dst_abs = os.path.abspath(dst)
    for src in sources:
        if _same_or_nested(dst_abs, src):
            raise OutputExistsError(f"{dst}: the output would overwrite the input {src}")
    if os.path.lexists(dst_abs):
        if not overwrite:
            raise _already_exists(dst)
        check_replaceable(dst, codec, overwrite)
    parent = os.path.dirname(dst_abs)
    if not os.path.isdir(parent):
        raise CodecIOError(f"{dst}: folder {parent} does not exist")
    return dst_abs


@contextlib.contextmanager
def url_output(
    dst: str,
    *,
    codec: Codec | None = None,
    sources: Iterable[str] = (),
    overwrite: Overwrite = False,
) -> Iterator[str]:
    """Write straight to a URL: object stores have no rename, so this is not atomic;
    a failure removes what was written."""
    if any(os.path.abspath(str(s)) == dst or str(s) == dst for s in sources):
        raise OutputExistsError(f"{dst}: the output would overwrite the input")
    fs, p = _fs(dst)
    if fs.exists(p):
        if not overwrite:
            raise _already_exists(dst)
        check_replaceable(dst, codec, overwrite)
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
def upload_output(
    dst: str,
    *,
    codec: Codec | None = None,
    sources: Iterable[str] = (),
    overwrite: Overwrite = False,
) -> Iterator[str]:
    """For formats written only to local files (npz, HDF5): write in a local
    temporary folder, then upload. The object appears only after a complete
    upload; a failed upload raises and removes whatever part arrived."""
    import tempfile

    with url_output(dst, codec=codec, sources=sources, overwrite=overwrite):
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
    """Temporaries and old outputs of earlier runs that are over, newest first.

    Called under the writer lock: a leftover of this very process is also over
    (the lock keeps a second writer of the same destination out)."""
    found = []
    for mark in (TMP_MARK, OLD_MARK):
        prefix = f".{base}{mark}"
        for name in os.listdir(parent):
            if name.startswith(prefix):
                pid = name[len(prefix) :].split("-", 1)[0]
                if pid.isdigit() and (int(pid) == os.getpid() or not _pid_alive(int(pid))):
                    found.append(os.path.join(parent, name))
    return sorted(found, key=lambda p: os.lstat(p).st_mtime, reverse=True)


@contextlib.contextmanager
def atomic_output(
    dst: str,
    *,
    codec: Codec | None = None,
    sources: Iterable[str] = (),
    overwrite: Overwrite = False,
    resume: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """Yield a temporary path; on success rename it to ``dst``, on any failure delete it.

    With ``overwrite``, an existing ``dst`` is replaced only if ``codec.owns`` it.
    Leftovers of earlier runs are deleted -- except with ``resume``: the newest
    leftover temporary folder is then checked by ``resume(folder)`` (which
    raises if it cannot be continued, leaving it in place) and handed over as
    the temporary path, its contents kept. A leftover or old output that cannot
    be deleted raises :class:`OldOutputLeftError` once the new output is in place."""
    dst_abs = check_destination(dst, sources, overwrite, codec)
    parent, base = os.path.split(dst_abs)
    with _writer_lock(parent, base, dst):
        stale = _stale(parent, base)
        adopt = None
        if resume is not None:
            adopt = next((p for p in stale if TMP_MARK in p and os.path.isdir(p)), None)
            if adopt is not None:
                resume(adopt)
        stuck = [(path, err) for path in stale if path != adopt and (err := _remove_local(path))]

        def replaceable() -> None:  # again: another writer may have finished meanwhile
            check_destination(dst, sources, overwrite, codec)

        replaceable()
        with _atomic_rename(dst, dst_abs, parent, base, replaceable, adopt) as tmp:
            yield tmp
        if stuck:
            path, err = stuck[0]
            raise OldOutputLeftError(
                f"{dst}: written, but a leftover of an earlier run cannot be removed: "
                f"{path} ({_describe(err)}); remove it by hand",
                output=dst_abs,
                left=path,
            )


@contextlib.contextmanager
def _atomic_rename(
    dst: str,
    dst_abs: str,
    parent: str,
    base: str,
    replaceable: Callable[[], None],
    adopt: str | None = None,
) -> Iterator[str]:
    tmp = os.path.join(parent, f".{base}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")
    if adopt is not None:
        os.replace(adopt, tmp)
    old: str | None = None
    left: tuple[str, OSError] | None = None  # the old output, and why it could not go
    try:
        yield tmp
        if not os.path.lexists(tmp):
            raise CodecIOError(f"{dst_abs}: the writer produced no output")
        _fsync_tree(tmp)
        if os.path.lexists(dst_abs):
            # Checked at the moment of replacing, not only at the start: the
            # destination may have appeared or changed during a long write.
            replaceable()
            try:
                if os.path.isfile(tmp) and stat.S_ISREG(os.lstat(dst_abs).st_mode):
                    os.replace(tmp, dst_abs)  # one atomic step: no moment without an output
                else:  # a folder cannot be renamed over: move the old one aside first
                    old = os.path.join(
                        parent, f".{base}{OLD_MARK}{os.getpid()}-{secrets.token_hex(4)}"
                    )
                    os.replace(dst_abs, old)
                    os.replace(tmp, dst_abs)
            except OSError as e:
                raise CodecIOError(
                    f"{dst}: cannot replace the old output: {_describe(e)}"
                ) from None
            if old is not None:
                failure = _remove_local(old)
                if failure is not None:
                    left = (old, failure)
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
        if old is not None and not os.path.lexists(dst_abs):
            with contextlib.suppress(OSError):
                os.replace(
                    old, dst_abs
                )  # the old output moved aside, the new one not in: put it back
        remove_path(tmp)
        raise
    if left is not None:
        old, failure = left
        raise OldOutputLeftError(
            f"{dst}: written, but the old output could not be removed entirely: it is left at "
            f"{old} ({_describe(failure)}); remove it by hand (the next run to {base} retries)",
            output=dst_abs,
            left=old,
        )


def fmt_bytes(n: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as file managers show sizes)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def check_room(dst: str, folder: str, need: int, what: str) -> None:
    """Refuse, before a byte is written, an output of up to ``need`` bytes (``what`` says
    why that many) that the process's file size limit (``ulimit -f``) or the free space
    in ``folder`` cannot hold; ``dst`` is the destination the user named."""
    hint = "nothing was written (-o check_space=false tries anyway)"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and need > soft:
        raise CodecIOError(
            f"{dst}: file too large for this process's file size limit (ulimit -f) of "
            f"{soft:,} bytes: {what}; {hint}"
        )
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise CodecIOError(
            f"{dst}: not enough free space in {folder}: {what}, {free:,} bytes free; {hint}"
        )
