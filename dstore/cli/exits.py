"""How the command ends: an error as one line, a MemoryError named, SIGTERM handled as
Ctrl-C (its clean-up runs at once), a warning as one line."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from ..errors import DstoreError, Terminated
from .words import cli_words

__all__ = ["SigtermAsInterrupt", "error_line", "memory_error_line", "warning_line"]


def memory_error_line(args: argparse.Namespace, e: MemoryError) -> str:
    """``MemoryError: SRC: out of memory (...)``."""
    from ..model.names import printable

    where = getattr(args, "src", None) or getattr(args, "path", None)
    detail = str(e).splitlines()[0] if str(e) else ""
    return f"MemoryError: {f'{where}: ' if where else ''}out of memory" + (
        f" ({printable(detail)})" if detail else ""
    )


def error_line(args: argparse.Namespace, e: Exception) -> str:
    """An error as the one line the CLI prints: ``TYPE: message``."""
    from ..model.names import printable

    text = cli_words(str(e))  # --overwrite, not the library's overwrite=True
    # dstore's own messages are one line by construction (a newline is in a name
    # from the data): shown whole, escaped; a library's may run on over many lines
    if text and not isinstance(e, DstoreError):
        text = text.splitlines()[0]
    message = printable(text) if text else repr(e)
    if isinstance(e, OSError) and not isinstance(e, DstoreError) and e.filename is None:
        # a write that ran out of room (errno 28) names no file: name what we wrote
        where = getattr(args, "dst", None) or getattr(args, "path", None)
        if where:
            message = f"{where}: {e.strerror or message} (errno {e.errno})"
    return f"{type(e).__name__}: {message}"


class SigtermAsInterrupt:
    """SIGTERM raises :class:`~dstore.errors.Terminated`, a KeyboardInterrupt, in the
    main thread: every clean-up that Ctrl-C runs (temporary output, writer lock, a
    sharded run's journal) runs for it too, at once, instead of at the next run.
    A second SIGTERM during that clean-up is ignored, so that it completes."""

    def __init__(self) -> None:
        self.received = False
        self.previous: Any = None

    def handle(self, signum: int, frame: Any) -> None:
        self.received = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated("terminated (SIGTERM): no output was left behind")

    def __enter__(self) -> SigtermAsInterrupt:
        self.received = False
        if threading.current_thread() is threading.main_thread():  # signal() needs it
            self.previous = signal.signal(signal.SIGTERM, self.handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None


def warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """A warning from dstore (an old option name...) as one line, not Python's two."""
    print(f"dstore: warning: {message}", file=sys.stderr)
