"""Shard files of a native library whose thread pool does not survive ``fork``.

Such a library (``Codec.fork_safe = False``) starts C++ threads in the process
that first uses it; a process forked after that (a DataLoader worker started
with 'fork') inherits them broken and crashes or hangs in its first call. So
its shards are written in a child interpreter fed the records on a pipe
(:func:`write_in_child`), which leaves the parent untouched, and a reader
refuses to use the library in a process forked after its parent used it
(:class:`ForkGuard`) with a line that says what to do instead.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Iterator

from ..errors import CodecIOError

__all__ = ["ForkGuard", "write_in_child"]

#: a record's length before it on the child's standard input
_LEN = struct.Struct("<Q")
#: what follows the format's setup in the child: length-prefixed records until EOF
_LOOP = """
read = sys.stdin.buffer.read
while len(head := read(8)) == 8:
    writer.write(read(struct.unpack("<Q", head)[0]))
writer.close()
"""


def write_in_child(
    path: str, library: str, setup: str, args: list[str], groups: Iterator[list[bytes]]
) -> None:
    """The records of ``groups`` written to ``path`` by a child interpreter that runs
    ``setup`` (Python defining ``writer``, with ``write(bytes)`` and ``close()``; its
    ``sys.argv`` is ``[-c, path, *args]``). A plain interpreter, not multiprocessing,
    so a Dask worker's daemon process may start it too. The child's last line of
    error output is the error, naming ``path`` and ``library``."""
    script = f"import struct, sys\n{setup}\n{_LOOP}"
    child = subprocess.Popen(
        [sys.executable, "-c", script, path, *args],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None
    try:
        for group in groups:
            child.stdin.write(b"".join(p for rec in group for p in (_LEN.pack(len(rec)), rec)))
    except BrokenPipeError:
        pass  # the child stopped: its exit status and message say why, below
    except BaseException:
        child.kill()  # a failed or interrupted write: the container removes the .part
        child.communicate()
        raise
    try:
        _, raw = child.communicate()  # end of input, its messages, every pipe closed
    except BrokenPipeError:  # it stopped early: its status says why
        raw = child.stderr.read() if child.stderr is not None else b""
        child.wait()
    err = (raw or b"").decode(errors="replace").strip()
    if child.returncode != 0:
        last = err.splitlines()[-1] if err else f"exit status {child.returncode}"
        raise CodecIOError(f"{path}: {library}'s writer failed: {last}")


class ForkGuard:
    """Remembers the process that first used ``library`` (its thread pool lives there)
    and refuses it in a process forked after that, naming the file being read."""

    def __init__(self, library: str) -> None:
        self.library = library
        self.pid: int | None = None

    def check(self, path: str) -> None:
        if self.pid is not None and os.getpid() != self.pid:
            raise CodecIOError(
                f"{path}: this process was forked after {self.library} was used in its parent "
                f"(a DataLoader worker started with 'fork'); {self.library}'s C++ thread pool "
                "does not survive fork and would crash or hang here: pass "
                "multiprocessing_context='spawn' (or 'forkserver') to the DataLoader"
            )
        self.pid = os.getpid()
