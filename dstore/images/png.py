"""PNG encoding for TFRecord image fields.

``fast`` (the default) writes 8-bit RGB and RGBA images with fpng (Rich
Geldreich's PNG writer, through the ``fpng`` package) in its two-pass mode
(``SLOWER``): the first row unfiltered, every other row UP-filtered, deflated
by a run-length-only coder (matches at the distance of one pixel) with a
Huffman table built for the image in a first pass. Other images (gray,
gray+alpha, 16-bit, empty, or past fpng's size limits) get UP-filtered rows
(numpy) deflated by libdeflate at level 1 (through imagecodecs); only the PNG
container is written here then -- signature, IHDR, one IDAT, IEND, each chunk
with its CRC-32. A numeric level (0-9) uses zlib with libpng's filter
heuristic, which gives TensorFlow's sizes. Decoding always goes through ISA-L
or libpng (see :func:`decode`).

Why these and not ISA-L (issues #17, #24): the bytes of an output must be a
function of the source, the options and the versions in :func:`encoder_id`
only, or ``--resume`` and Dask runs stop matching an uninterrupted run. ISA-L's
level-1 body (``igzip_icf_body_h1_gr_bt.asm``, ``.write_first_byte``) hashes
the third byte of every stream from a register that still holds the address
of the ``isal_zstream`` -- which python-isal keeps on the calling thread's
stack -- so one early hash-table entry lands in a slot picked by the stack
address: about one PNG in a thousand then comes out a few bytes different
(still valid, same pixels) depending on which thread, in which process,
encoded it. Levels 2 and 3 run other code and showed no difference in the
benchmark's runs, but a defect that hits one stream in tens of thousands can
hide in such counts, and level 2 is not faster than fpng anyway. fpng keeps
no hash table (its only match distance is one pixel), its Huffman tables come
from symbol counts, and its CPU-dependent code computes CRC-32 and Adler-32,
whose values do not depend on the CPU; libdeflate is portable C whose output
depends on its input and level only.

Size (issue #24): fpng's one-pass mode (the package's in-memory
``encode_ndarray``) uses a fixed Huffman table and wrote 1.165x TensorFlow's
bytes on photo tiles; the two-pass mode writes about 1.10x, at about 60% of
the one-pass speed. The package passes flags only to its file writer, so
fpng writes into a pipe (or memfd) of ours (:class:`_Scratch`).
``benchmarks/bench_png_encoders.py`` measures the candidates (speed per core,
size against TensorFlow, bytes across threads, processes, stack depths and
environment sizes). The binding holds the GIL: conversions encode chunks in
worker processes (:mod:`dstore.sharding.processes`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable
from typing import Any

import imagecodecs
import numpy as np
from isal import isal_zlib

from .imagecodec import check_image_pixels

__all__ = [
    "decode",
    "encode_adaptive",
    "encode_fast",
    "encoder_id",
    "holds_gil",
    "png_encoder",
    "png_header",
]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> gray, gray+alpha, RGB, RGBA
_FILTER_UP = 2
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
# |byte as signed int8|: libpng's per-row cost of a filtered byte
_SIGNED_COST = np.minimum(np.arange(256), 256 - np.arange(256)).astype(np.uint16)


def _chunk(kind: bytes, data: bytes | bytearray) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))
    )


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


def _fpng_takes(img: np.ndarray) -> bool:
    """Whether ``img`` is fpng's (8-bit RGB/RGBA within its size limits): its shape and dtype
    decide, never the outcome of an encode."""
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] not in (3, 4) or not img.size:
        return False
    h, w = img.shape[:2]
    return h <= _FPNG_MAX_SIDE and w <= _FPNG_MAX_SIDE and h * w <= _FPNG_MAX_PIXELS


def encode_fast(img: np.ndarray) -> bytes:
    """PNG of a uint8/uint16 ``(H, W)`` or ``(H, W, C)`` image: fpng (two-pass) for 8-bit
    RGB/RGBA, else UP filter + libdeflate level 1 (the choice depends on the image's shape
    and dtype only)."""
    return encode_fpng(img) if _fpng_takes(img) else encode_up_libdeflate(img)


def encode_fastest(img: np.ndarray) -> bytes:
    """As :func:`encode_fast`, with fpng in one pass (a fixed Huffman table: faster, larger)."""
    return encode_fpng(img, two_pass=False) if _fpng_takes(img) else encode_up_libdeflate(img)


def encode_up_libdeflate(img: np.ndarray) -> bytes:
    """PNG of a uint8/uint16 ``(H, W)`` or ``(H, W, C)`` image: UP filter, libdeflate level 1."""
    rows, _, ihdr = _rows(img)
    filtered = np.empty((rows.shape[0], rows.shape[1] + 1), np.uint8)
    filtered[:, 0] = _FILTER_UP
    if len(rows):
        filtered[0, 1:] = rows[0]
        np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])
    # zlib-wrapped, as IDAT wants; imagecodecs' stubs list bytes/bytearray/mmap, but
    # the function takes any buffer, and a copy of the image to satisfy them would cost
    idat = imagecodecs.deflate_encode(filtered, level=1)  # type: ignore[arg-type]
    return b"".join((_SIGNATURE, ihdr, _chunk(b"IDAT", idat), _IEND))


def _rows(img: np.ndarray) -> tuple[np.ndarray, int, bytes]:
    """Big-endian sample bytes per row, bytes per pixel, and the IHDR chunk."""
    h, w = img.shape[:2]
    channels = img.shape[2] if img.ndim == 3 else 1
    rows = (
        np.ascontiguousarray(img, dtype=img.dtype.newbyteorder(">")).view(np.uint8).reshape(h, -1)
    )
    header = struct.pack(">IIBBBBB", w, h, img.dtype.itemsize * 8, _COLOR_TYPE[channels], 0, 0, 0)
    return rows, channels * img.dtype.itemsize, _chunk(b"IHDR", header)


def encode_adaptive(img: np.ndarray, level: int) -> bytes:
    """PNG as libpng (and so TensorFlow) writes it: per-row filter choice, zlib Z_FILTERED.

    Each row gets the filter (None, Sub, Up, Average, Paeth) whose output has
    the smallest sum of absolute signed bytes -- libpng's default heuristic --
    computed for all rows at once with numpy; zlib then runs at ``level``
    with the strategy libpng picks for filtered images.
    """
    filtered, ihdr = adaptive_filtered(img)
    comp = zlib.compressobj(level, zlib.DEFLATED, 15, 8, zlib.Z_FILTERED)
    idat = comp.compress(filtered.data) + comp.flush()
    return b"".join((_SIGNATURE, ihdr, _chunk(b"IDAT", idat), _IEND))


def adaptive_filtered(img: np.ndarray) -> tuple[np.ndarray, bytes]:
    """The rows of ``img`` filtered as libpng chooses (filter byte first), and the IHDR chunk."""
    rows, bpp, ihdr = _rows(img)
    h, n = rows.shape
    # Neighbours of every byte: left (a), up (b), up-left (c); uint8 arithmetic wraps as PNG's does.
    a = np.zeros_like(rows)
    a[:, bpp:] = rows[:, :-bpp]
    b = np.zeros_like(rows)
    b[1:] = rows[:-1]
    c = np.zeros_like(rows)
    c[1:, bpp:] = rows[:-1, :-bpp]
    cand = np.empty((5, h, n), np.uint8)
    cand[0] = rows
    np.subtract(rows, a, out=cand[1])
    np.subtract(rows, b, out=cand[2])
    np.subtract(rows, (a >> 1) + (b >> 1) + (a & b & 1), out=cand[3])
    a16, b16, c16 = a.astype(np.int16), b.astype(np.int16), c.astype(np.int16)
    pa, pb, pc = np.abs(b16 - c16), np.abs(a16 - c16), np.abs(a16 + b16 - 2 * c16)
    np.subtract(rows, np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c)), out=cand[4])
    choice = _SIGNED_COST[cand].sum(axis=2, dtype=np.int32).argmin(axis=0)
    filtered = np.empty((h, n + 1), np.uint8)
    filtered[:, 0] = choice
    filtered[:, 1:] = cand[choice, np.arange(h)]
    return filtered, ihdr


def encoder_id(level: str) -> str:
    """The deflate library and version behind ``png_encoder(level)``: with the
    source and the options, all that the encoded bytes depend on."""
    if level in FPNG_LEVELS:
        from importlib.metadata import version

        return (
            f"fpng {version('fpng')}{' two-pass (SLOWER)' if FPNG_LEVELS[level] else ''} "
            "for 8-bit RGB/RGBA, "
            f"{imagecodecs.deflate_version()} level 1 for other images"
        )
    return f"zlib {zlib.ZLIB_RUNTIME_VERSION} level {int(level)}"


def holds_gil(level: str) -> bool:
    """Whether ``png_encoder(level)`` holds the GIL while it encodes 8-bit RGB/RGBA
    (fpng's binding does; zlib and libdeflate let go of it)."""
    return level in FPNG_LEVELS


def png_encoder(level: str) -> Callable[[np.ndarray], bytes]:
    """``fast``, ``fastest``, or a zlib level 0-9 with libpng's filter heuristic (6:
    TensorFlow's sizes)."""
    if level in FPNG_LEVELS:
        return encode_fast if FPNG_LEVELS[level] else encode_fastest
    lv = int(level)
    return lambda img: encode_adaptive(img, lv)


_CHANNELS = {0: 1, 4: 2, 2: 3, 6: 4}


def decode(data: bytes, where: str = "PNG") -> np.ndarray:
    """Decode a PNG; files whose rows all use the UP (or no) filter, or whose first row uses
    no filter and the others UP -- what ``fast`` writes --
    are inflated by ISA-L and unfiltered by one numpy cumulative sum, anything else by libpng.

    Chunk CRCs are not checked on the fast path: in a TFRecord the record's
    CRC32C already covers every byte. A header declaring more pixels than
    :data:`~dstore.images.imagecodec.MAX_IMAGE_PIXELS` is refused first
    (a :class:`~dstore.errors.CodecIOError` naming ``where``).
    """
    check_image_pixels(data, where)
    fast = _decode_up(data)
    return fast if fast is not None else imagecodecs.png_decode(data)


def _prefix_rows(deltas: np.ndarray) -> np.ndarray:
    """Each row plus every row above it, mod 256 (undoing UP filters): log2(H) whole-array
    adds between two buffers instead of ``np.cumsum(axis=0)``, which walks the image a
    column at a time (4x slower on 256x256x3 tiles; reading PNGs for training is bound
    by this). Two allocations per image: a DataLoader worker maps each one fresh."""
    src = np.array(deltas, order="C")
    dst = np.empty_like(src)
    step = 1
    while step < len(src):
        dst[:step] = src[:step]
        np.add(src[step:], src[:-step], out=dst[step:])
        src, dst = dst, src
        step *= 2
    return src


def png_header(data: bytes) -> tuple[int, int, int, int, int] | None:
    """A PNG's width, height, bit depth, colour type and interlace method from its IHDR,
    or None if ``data`` does not start as a PNG does."""
    if len(data) < 29 or data[:8] != _SIGNATURE or data[12:16] != b"IHDR":
        return None
    w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    return w, h, depth, color, interlace


def _decode_up(data: bytes) -> np.ndarray | None:
    header = png_header(data)
    if header is None:
        return None
    w, h, depth, color, interlace = header
    if interlace or depth not in (8, 16) or color not in _CHANNELS or not w or not h:
        return None
    idat = []
    pos = 33
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat.append(data[pos + 8 : pos + 8 + length])
        elif kind == b"IEND":
            break
        elif kind[0] & 0x20 == 0:  # an unknown critical chunk (e.g. PLTE): libpng's job
            return None
        pos += 12 + length
    channels = _CHANNELS[color]
    row_bytes = w * channels * depth // 8
    size = h * (row_bytes + 1)
    try:
        # at most one byte past the rows: a small IDAT that inflates to gigabytes (a
        # deflate bomb under an honest IHDR) is left to libpng, which stops at the last row
        inflate = isal_zlib.decompressobj()
        raw = inflate.decompress(b"".join(idat), size + 1)
    except Exception:  # noqa: BLE001 - let libpng produce the precise error
        return None
    if len(raw) != size or not inflate.eof:
        return None
    rows = np.frombuffer(raw, np.uint8).reshape(h, row_bytes + 1)
    filters = rows[:, 0]
    if filters.any():
        # UP on the first row is no filter (the row above is zeros): one cumulative sum
        if not (filters[1:] == _FILTER_UP).all() or filters[0] not in (0, _FILTER_UP):
            return None
        pixels = _prefix_rows(rows[:, 1:])
    else:
        pixels = rows[:, 1:]
    dtype = np.dtype(">u2") if depth == 16 else np.dtype(np.uint8)
    img = pixels.view(dtype).astype(dtype.newbyteorder("="), copy=False)
    return img.reshape((h, w) if channels == 1 else (h, w, channels))
