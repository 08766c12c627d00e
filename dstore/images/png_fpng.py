"""fpng (Rich Geldreich's PNG writer, through the ``fpng`` package): the ``fast`` and
``fastest`` PNG levels for 8-bit RGB and RGBA images.

fpng filters every row but the first with UP and deflates with a
run-length-only coder (matches at the distance of one pixel). Its bytes depend
on the pixels only: it keeps no hash table, its Huffman tables come from symbol
counts, and its CPU-dependent code computes CRC-32 and Adler-32, whose values do
not depend on the CPU.

Size (issue #24): fpng's one-pass mode (the package's in-memory
``encode_ndarray``) uses a fixed Huffman table and wrote 1.165x TensorFlow's
bytes on photo tiles; the two-pass mode writes about 1.10x, at about 60% of
the one-pass speed. The package passes flags only to its file writer, so
fpng writes into a pipe (or memfd) of ours (:class:`_Scratch`). The binding
holds the GIL: conversions encode chunks in worker processes
(:mod:`dstore.sharding.processes`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["FPNG_LEVELS", "encode_fpng", "fpng_takes", "fpng_version"]


@functools.cache
def _fpng_ext() -> Any:
    """fpng's extension module, imported on first use (its package also imports Pillow)."""
    from fpng import fpng_ext

    return fpng_ext


class _Scratch:
    """One thread's files that fpng's two-pass encoder writes into, read back at once.

    The ``fpng`` package passes flags (``SLOWER``: two passes, a Huffman table
    built for the image) only to ``encode_image_to_file``; its in-memory encoder
    has the one-pass table, about 6% larger. On Linux fpng writes into a pipe
    of ours through ``/proc/self/fd`` when its output surely fits the pipe's
    buffer (a tile: no page is faulted in per image, which on a virtual machine
    costs more than the encoding's second pass), else into a memfd; elsewhere
    into a temporary file. The bytes are fpng's either way. A forked child
    inherits the parent's files, so it makes its own (``pid``). The descriptors
    close when the thread's local storage (:data:`_scratch`) drops this object:
    when the thread ends, or when the interpreter does.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.pipe_bytes = 0  # the most fpng may write into the pipe
        self.fds: list[int] = []
        if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
            self.fd = os.memfd_create("dstore-png")
            self.path = f"/proc/self/fd/{self.fd}"
            self.pipe_r, self.pipe_w = os.pipe()
            self.fds = [self.fd, self.pipe_r, self.pipe_w]
            os.set_blocking(self.pipe_r, False)
            capacity = 1 << 16  # Linux's default
            with contextlib.suppress(OSError):
                import fcntl

                capacity = fcntl.fcntl(self.pipe_w, 1031, 1 << 20)  # F_SETPIPE_SZ
            self.pipe_bytes = capacity // 2  # margin for writes that fill pages partly
            self.pipe_path = f"/proc/self/fd/{self.pipe_w}"
        else:  # pragma: no cover - not Linux
            self.fd, self.path = tempfile.mkstemp(prefix="dstore-png-", suffix=".png")
            self.fds = [self.fd]
            atexit.register(_remove_quietly, self.path)

    def close(self, _close: Callable[[int], None] = os.close) -> None:
        # os.close bound at definition: this may run while the interpreter tears modules down
        fds, self.fds = self.fds, []
        for fd in fds:
            try:  # noqa: SIM105 - no contextlib while the interpreter tears modules down
                _close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()


def _remove_quietly(path: str) -> None:  # pragma: no cover - not Linux
    with contextlib.suppress(OSError):
        os.remove(path)


class _ThreadScratch(threading.local):
    files: _Scratch | None = None  # no __init__: a thread's first access costs nothing


_scratch = _ThreadScratch()


def _scratch_files() -> _Scratch:
    """This thread's scratch files, made on first use, and anew in a forked child."""
    files = _scratch.files
    if files is None or files.pid != os.getpid():
        if files is not None:  # forked: the inherited files are shared with the parent
            files.close()  # the child's copies of the descriptors only
        files = _scratch.files = _Scratch()
    return files


def _drain(fd: int) -> bytes:
    """Everything in a non-blocking pipe whose writer has finished."""
    parts = []
    while True:
        try:
            part = os.read(fd, 1 << 20)
        except BlockingIOError:
            break
        if not part:
            break
        parts.append(part)
    return b"".join(parts)


#: ``png_level`` values fpng encodes 8-bit RGB/RGBA at: ``fast`` in its two-pass mode
#: (issue #24: 1.10x TensorFlow's bytes on photo tiles, about 1.7x the CPU per tile),
#: ``fastest`` in one pass (1.165x TensorFlow's bytes; a 2-core conversion ran at about
#: 1.6x the two-pass speed, as fpng holds the GIL: docs/benchmarks.md)
FPNG_LEVELS = {"fast": True, "fastest": False}

#: fpng refuses images past these (``fpng_encode_image_to_memory``'s own check)
_FPNG_MAX_SIDE = 1 << 24
_FPNG_MAX_PIXELS = (1 << 32) - 1


def encode_fpng(img: np.ndarray, two_pass: bool = True) -> bytes:
    """fpng's PNG (in two passes or one) of an 8-bit ``(H, W, 3|4)`` image within fpng's
    size limits."""
    fpng_ext = _fpng_ext()
    if not two_pass:
        png: bytes = fpng_ext.encode_ndarray(np.ascontiguousarray(img))
        if not png:
            raise OSError("fpng refused an image within its size limits")
        return png
    h, w, c = img.shape
    pixels = np.ascontiguousarray(img).tobytes()  # the binding takes bytes only
    scratch = _scratch_files()
    # fpng's largest output: stored (uncompressed) blocks of the filtered rows, plus chunks
    raw = (w * c + 1) * h
    into_pipe = raw + 5 * (raw // 65535 + 1) + 128 <= scratch.pipe_bytes
    path = scratch.pipe_path if into_pipe else scratch.path
    if not fpng_ext.encode_image_to_file(path, pixels, w, h, c, fpng_ext.SLOWER.value):
        # not a silent fallback to another encoder: the bytes would depend on the failure
        raise OSError(f"fpng could not write its scratch file {path}")
    if into_pipe:
        return _drain(scratch.pipe_r)
    with open(scratch.path, "rb") as f:  # the memfd again, or the temporary file
        return f.read()


def fpng_takes(img: np.ndarray) -> bool:
    """Whether ``img`` is fpng's (8-bit RGB/RGBA within its size limits): its shape and dtype
    decide, never the outcome of an encode."""
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] not in (3, 4) or not img.size:
        return False
    h, w = img.shape[:2]
    return h <= _FPNG_MAX_SIDE and w <= _FPNG_MAX_SIDE and h * w <= _FPNG_MAX_PIXELS


def fpng_version(two_pass: bool) -> str:
    """fpng's package version and mode, as the manifest names them."""
    from importlib.metadata import version

    return f"fpng {version('fpng')}{' two-pass (SLOWER)' if two_pass else ''}"
