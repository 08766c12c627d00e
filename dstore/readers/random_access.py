"""A random-access copy of a dataset that only streams, owned by the reader that made it.

A deflated npz (dstore's default) is read front to back; a global shuffle, or a
map-style dataset, reads single records at random. Its codec makes a copy that does
(:meth:`dstore.abc.Codec.random_access_copy`: the npz with its members stored) once,
in a folder this object creates under the system's temporary folder and removes when
it is closed, garbage-collected or the process ends. It says so on stderr once (the
``dstore`` logger): the copy takes the dataset's full, inflated size.

A process killed outright (SIGKILL, the out-of-memory killer) removes nothing: the
next copy made removes such leftovers, only those dstore wrote -- a folder named
``dstore-random-access-<pid>-...`` holding dstore's mark with that pid and this host's
name (a container sharing the folder sees other processes), owned by this user, whose
process is gone.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
import weakref

from ..output import _pid_alive, fmt_bytes
from ..registry import get_codec_class

__all__ = ["RandomAccessCopy"]

_log = logging.getLogger("dstore")

_PREFIX = "dstore-random-access-"
#: the file in a copy's folder that says dstore made it, and for which process
_MARK = ".dstore-random-access"


def _mark(pid: int) -> str:
    """What a copy's mark holds: the process and the host it ran on."""
    return f"{pid} {socket.gethostname()}"


def _uid() -> int | None:
    getuid = getattr(os, "getuid", None)  # none on Windows: no folder passes for ours
    return getuid() if getuid is not None else None


def _leftovers(parent: str) -> list[str]:
    """Folders under ``parent`` that a killed dstore process left: named and marked as
    its copies, this user's, their process gone."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    found = []
    for name in names:
        pid = name[len(_PREFIX) :].split("-", 1)[0]
        if not name.startswith(_PREFIX) or not pid.isdigit():
            continue
        folder = os.path.join(parent, name)
        if _is_ours(folder, int(pid)) and not _pid_alive(int(pid)):
            found.append(folder)
    return found


def _is_ours(folder: str, pid: int) -> bool:
    """A real folder of this user's (not a link) holding dstore's mark for ``pid`` on
    this host, the mark a regular file (a FIFO there would block the read)."""
    mark = os.path.join(folder, _MARK)
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != _uid():
            return False
        if not stat.S_ISREG(os.lstat(mark).st_mode):
            return False
        with open(mark, encoding="utf-8") as f:
            return f.read(512).strip() == _mark(pid)
    except (OSError, ValueError):  # gone meanwhile, unreadable, not UTF-8
        return False


def _new_folder() -> str:
    """A fresh folder for a copy, marked with this process's id, once the leftovers of
    killed processes are removed."""
    for folder in _leftovers(tempfile.gettempdir()):
        shutil.rmtree(folder, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    with open(os.path.join(folder, _MARK), "w", encoding="utf-8") as f:
        f.write(_mark(os.getpid()) + "\n")
    return folder


class RandomAccessCopy:
    """The copy of ``path`` (format ``format``) that ``what`` reads; :attr:`path` is None
    when the format makes none."""

    def __init__(self, path: str, format: str, what: str) -> None:
        self.folder = _new_folder()
        self._remove = weakref.finalize(self, shutil.rmtree, self.folder, True)
        try:
            self.path = get_codec_class(format).random_access_copy(path, self.folder)
        except BaseException:
            self.close()
            raise
        if self.path is None:
            self.close()
            return
        size = sum(
            os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(self.folder) for f in fs
        )
        _log.warning(
            "%s only streams (a %s read in order); for %s, a copy that reads any record "
            "was written once to %s (%s), removed when the dataset is closed",
            path,
            format,
            what,
            self.folder,
            fmt_bytes(size),
        )

    def close(self) -> None:
        """Remove the copy (only the folder this object created)."""
        self._remove()
