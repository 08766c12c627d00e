"""Who may append to a dataset now: a lock on this machine, a claim on an object store.

Locally, appenders to one dataset take turns: :func:`append_lock` holds an
``flock`` on ``.<name>.dstore-append`` beside it, which the kernel releases when the
holder exits however it exits (a SIGKILL included), so a killed appender never
blocks the next one. A second appender waits for the first, saying so once through
the ``dstore`` logger (the command line prints it on stderr), then appends after it.

An object store has no lock: a sharded dataset's versions are committed by an
exclusive create of the next manifest (:mod:`dstore.sharding.versions`). A dataset
that is one object or a zarr store claims the next version first with
:func:`version_claim`: an exclusive create of ``<dataset>.dstore-claim-<N>``; a
second appender finds it taken and stops with one line, which running it again after
the first has finished resolves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator

from . import fs
from .errors import AppendConflictError, AppendError

__all__ = ["append_lock", "no_exclusive_create", "version_claim"]


def no_exclusive_create(root: str) -> str:
    """The line that refuses to append where no create-if-absent write exists."""
    return (
        f"{root}: this store offers no create-if-absent write, so a concurrent append could "
        "be lost; appends there are refused (append to a local copy, or to s3://)"
    )


_log = logging.getLogger("dstore")


def _lock_path(dst: str) -> str:
    parent, base = os.path.split(os.path.abspath(dst))
    return os.path.join(parent, f".{base}.dstore-append")


@contextlib.contextmanager
def append_lock(dst: str) -> Iterator[None]:
    """Hold the append lock of the local dataset ``dst`` (waiting for another holder)."""
    import fcntl

    path = _lock_path(dst)
    told = False
    while True:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not told:
                _log.warning(
                    "%s: another dstore process (pid %s) is appending to it; waiting for it "
                    "to finish",
                    dst,
                    _holder(path),
                )
                told = True
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a lock file its last holder removed while this one waited on it
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)  # while still held: a waiter notices and takes a new one
        os.close(fd)


def _holder(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip() or "?"
    except OSError:
        return "?"


@contextlib.contextmanager
def version_claim(dst: str, number: int, current: Callable[[], int]) -> Iterator[None]:
    """Claim version ``number`` of the dataset at URL ``dst``: created only if no other
    writer holds it, then ``current()`` (the dataset's latest version, read again) must
    still be ``number - 1``; else :class:`AppendConflictError`. Released at the end."""
    claim = f"{dst.rstrip('/')}.dstore-claim-{number:08d}"
    if not fs.offers_exclusive_create(claim):
        raise AppendError(no_exclusive_create(dst))
    note = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
    try:
        fs.create_exclusive(claim, json.dumps(note).encode())
    except FileExistsError:
        raise AppendConflictError(
            f"{dst}: another append holds the claim to version {number} ({claim}); run this "
            "again when it has finished (if no append is running, it was killed: remove the claim)"
        ) from None
    try:
        now = current()
        if now != number - 1:
            raise AppendConflictError(
                f"{dst}: another writer committed version {now} since this append read "
                f"version {number - 1}; run it again to append after it"
            )
        yield
    finally:
        store, p = fs.url_fs(claim)
        with contextlib.suppress(FileNotFoundError):
            store.rm(p)
