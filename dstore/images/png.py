"""PNG encoding for image fields: the ``png_level`` choices, and decoding.

Levels (their names are declared in :mod:`.options`; sizes and speeds
from ``benchmarks/bench_png_size.py``, docs/benchmarks.md):

- ``fast`` (the default) and ``fastest``: fpng in two passes or one for 8-bit
  RGB and RGBA (:mod:`.png_fpng`: UP-filtered rows, a run-length-only
  coder); other images (gray, gray+alpha, 16-bit, empty, or past fpng's size
  limits) get UP-filtered rows deflated by libdeflate at level 1.
- ``balanced``: SUB or UP per row, whichever costs less, deflated by
  libdeflate at level 1, for every image (issue #40: within 1.12x of
  TensorFlow's bytes on satellite tiles, where fpng's UP-only rows write 1.19x).
- ``small``: libpng's per-row choice of all five filters, deflated by
  libdeflate at level :data:`SMALL_DEFLATE_LEVEL`: Pillow's sizes (which the
  peers' PNGs have), about 3x faster than Pillow.
- ``0``-``9``: libpng's per-row filter choice and zlib at that level with
  the strategy libpng uses (``6``: TensorFlow's bytes).

Only the PNG container is written here -- signature, IHDR, one IDAT, IEND,
each chunk with its CRC-32 -- except by fpng, which writes whole files.

Why no ISA-L, although it deflates about 2.5x faster than libdeflate (issues
#17, #24, #40): the bytes of an output must be a function of the source, the
options and the versions in :func:`encoder_id` only, or ``--resume`` and Dask
runs stop matching an uninterrupted run. ISA-L's levels 1 and 2 run the same
body (``igzip_icf_body_h1_gr_bt.asm``), whose ``.write_first_byte`` path hashes
the stream's third byte from a register (``rcx``) that was never loaded
there -- it still holds the address of the ``isal_zstream``, which python-isal
keeps on the calling thread's stack -- so one early hash-table entry lands in a
slot picked by the stack address: about one PNG in a thousand then comes out a
few bytes different (still valid, same pixels) depending on which thread, in
which process, encoded it. Level 3 dispatches on the CPU to different parsers
(lazy matching, or greedy on AVX-512: ``igzip_multibinary.asm``), so its bytes
depend on the machine. libdeflate is portable C whose output depends on its
input and level only; numpy's integer arithmetic picks the same filters
everywhere. Decoding always goes through ISA-L or libpng (see :func:`decode`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import imagecodecs
import numpy as np
from isal import isal_zlib

from .imagecodec import check_image_pixels
from .png_filters import (
    FILTER_UP,
    adaptive_filtered,
    image_rows,
    sub_up_filtered,
    up_filtered,
)
from .png_fpng import FPNG_LEVELS, encode_fpng, fpng_takes, fpng_version

__all__ = [
    "FPNG_LEVELS",
    "SMALL_DEFLATE_LEVEL",
    "decode",
    "encode_adaptive",
    "encode_balanced",
    "encode_fast",
    "encode_fastest",
    "encode_fpng",
    "encode_small",
    "encoder_id",
    "holds_gil",
    "png_encoder",
    "png_header",
]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> gray, gray+alpha, RGB, RGBA
_FILTER_UP = FILTER_UP
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"

#: libdeflate's level at ``png_level=small``: the fastest whose files match Pillow's (on
#: 1,500 tiles: 1.004x Pillow's bytes on photos, 0.984x on satellite imagery; level 8 gives
#: 1.000x / 0.975x at about 0.6x the speed, level 6 1.007x / 0.994x: docs/benchmarks.md)
SMALL_DEFLATE_LEVEL = 7


def _chunk(kind: bytes, data: bytes | bytearray) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))
    )


def _rows(img: np.ndarray) -> tuple[np.ndarray, int, bytes]:
    """Big-endian sample bytes per row, bytes per pixel, and the IHDR chunk."""
    rows, bpp = image_rows(img)
    h, w = img.shape[:2]
    channels = img.shape[2] if img.ndim == 3 else 1
    header = struct.pack(">IIBBBBB", w, h, img.dtype.itemsize * 8, _COLOR_TYPE[channels], 0, 0, 0)
    return rows, bpp, _chunk(b"IHDR", header)


def _png(ihdr: bytes, idat: bytes | bytearray) -> bytes:
    return b"".join((_SIGNATURE, ihdr, _chunk(b"IDAT", idat), _IEND))


def _libdeflate(filtered: np.ndarray, level: int) -> bytes:
    # zlib-wrapped, as IDAT wants; imagecodecs' stubs list bytes/bytearray/mmap, but
    # the function takes any buffer, and a copy of the image to satisfy them would cost
    return bytes(imagecodecs.deflate_encode(filtered, level=level))  # type: ignore[arg-type]


def encode_fast(img: np.ndarray) -> bytes:
    """PNG of a uint8/uint16 ``(H, W)`` or ``(H, W, C)`` image: fpng (two-pass) for 8-bit
    RGB/RGBA, else UP filter + libdeflate level 1 (the choice depends on the image's shape
    and dtype only)."""
    return encode_fpng(img) if fpng_takes(img) else encode_up_libdeflate(img)


def encode_fastest(img: np.ndarray) -> bytes:
    """As :func:`encode_fast`, with fpng in one pass (a fixed Huffman table: faster, larger)."""
    return encode_fpng(img, two_pass=False) if fpng_takes(img) else encode_up_libdeflate(img)


def encode_up_libdeflate(img: np.ndarray) -> bytes:
    """PNG of a uint8/uint16 ``(H, W)`` or ``(H, W, C)`` image: UP filter, libdeflate level 1."""
    rows, _, ihdr = _rows(img)
    return _png(ihdr, _libdeflate(up_filtered(rows), 1))


def encode_balanced(img: np.ndarray) -> bytes:
    """PNG of a uint8/uint16 ``(H, W)`` or ``(H, W, C)`` image: SUB or UP per row
    (:func:`~.png_filters.sub_up_filtered`), libdeflate level 1."""
    rows, bpp, ihdr = _rows(img)
    return _png(ihdr, _libdeflate(sub_up_filtered(rows, bpp), 1))


def encode_small(img: np.ndarray) -> bytes:
    """PNG of a uint8/uint16 ``(H, W)`` or ``(H, W, C)`` image: libpng's per-row filter
    choice, libdeflate at :data:`SMALL_DEFLATE_LEVEL`."""
    rows, bpp, ihdr = _rows(img)
    return _png(ihdr, _libdeflate(adaptive_filtered(rows, bpp), SMALL_DEFLATE_LEVEL))


def encode_adaptive(img: np.ndarray, level: int) -> bytes:
    """PNG as libpng (and so TensorFlow) writes it: per-row filter choice, zlib Z_FILTERED.

    Each row gets the filter (None, Sub, Up, Average, Paeth) whose output has
    the smallest sum of absolute signed bytes -- libpng's default heuristic --
    computed for all rows at once with numpy; zlib then runs at ``level``
    with the strategy libpng picks for filtered images.
    """
    rows, bpp, ihdr = _rows(img)
    comp = zlib.compressobj(level, zlib.DEFLATED, 15, 8, zlib.Z_FILTERED)
    idat = comp.compress(adaptive_filtered(rows, bpp).data) + comp.flush()
    return _png(ihdr, idat)


#: the named levels' encoders (:data:`~.options.NAMED_PNG_LEVELS` declares the
#: names; a test checks both list the same)
_NAMED = {
    "fast": encode_fast,
    "fastest": encode_fastest,
    "balanced": encode_balanced,
    "small": encode_small,
}


def encoder_id(level: str) -> str:
    """The libraries and versions behind ``png_encoder(level)``: with the source and the
    options, all that the encoded bytes depend on."""
    libdeflate = imagecodecs.deflate_version()
    if level in FPNG_LEVELS:
        return (
            f"{fpng_version(FPNG_LEVELS[level])} for 8-bit RGB/RGBA, "
            f"{libdeflate} level 1 for other images"
        )
    if level == "balanced":
        return f"SUB/UP rows (dstore), {libdeflate} level 1"
    if level == "small":
        return f"libpng's row filters, {libdeflate} level {SMALL_DEFLATE_LEVEL}"
    return f"zlib {zlib.ZLIB_RUNTIME_VERSION} level {int(level)}"


def holds_gil(level: str) -> bool:
    """Whether ``png_encoder(level)`` holds the GIL while it encodes 8-bit RGB/RGBA
    (fpng's binding does; numpy, zlib and libdeflate let go of it)."""
    return level in FPNG_LEVELS


def png_encoder(level: str) -> Callable[[np.ndarray], bytes]:
    """The encoder of a ``png_level``: ``fast``, ``fastest``, ``balanced``, ``small``, or a
    zlib level 0-9 with libpng's filter heuristic (6: TensorFlow's sizes)."""
    if level in _NAMED:
        return _NAMED[level]
    lv = int(level)
    return lambda img: encode_adaptive(img, lv)


_CHANNELS = {0: 1, 4: 2, 2: 3, 6: 4}


def decode(data: bytes, where: str = "PNG", out: np.ndarray | None = None) -> np.ndarray:
    """Decode a PNG; files whose rows all use the UP (or no) filter, or whose first row uses
    no filter and the others UP -- what ``fast`` writes --
    are inflated by ISA-L and unfiltered by one numpy cumulative sum, anything else by libpng.

    ``out``: where the pixels go when the PNG holds exactly that (a C-contiguous
    array of the decoded dtype and shape, or with a last axis of 1 for a grey PNG);
    ``out`` itself is then returned, and a new array otherwise -- a reader decodes
    into its batch without a copy per record and checks ``decode(...) is out``.

    Chunk CRCs are not checked on the fast path: in a TFRecord the record's
    CRC32C already covers every byte. A header declaring more pixels than
    :data:`~dstore.images.imagecodec.MAX_IMAGE_PIXELS` is refused first
    (a :class:`~dstore.errors.CodecIOError` naming ``where``).
    """
    check_image_pixels(data, where)
    header = png_header(data)
    if out is not None and (header is None or not _holds(out, header)):
        out = None
    fast = _decode_up(data, out)
    if fast is not None:
        return fast
    img = imagecodecs.png_decode(data)
    if out is not None and img.dtype == out.dtype and img.size == out.size:
        out[...] = img.reshape(out.shape)  # libpng's rows: one copy, as a caller would make
        return out
    return img


def _holds(out: np.ndarray, header: tuple[int, int, int, int, int]) -> bool:
    """True when ``out`` is what the PNG of ``header`` decodes to (see :func:`decode`)."""
    w, h, depth, color, _ = header
    channels = _CHANNELS.get(color)
    if channels is None or depth not in (8, 16) or not out.flags.c_contiguous:
        return False
    dtype = np.dtype(np.uint16 if depth == 16 else np.uint8)
    shape = (h, w) if channels == 1 else (h, w, channels)
    return out.dtype == dtype and out.shape in (shape, (*shape, 1) if channels == 1 else shape)


def _prefix_rows(deltas: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Each row plus every row above it, mod 256 (undoing UP filters): log2(H) whole-array
    adds between two buffers instead of ``np.cumsum(axis=0)``, which walks the image a
    column at a time (4x slower on 256x256x3 tiles; reading PNGs for training is bound
    by this). The passes alternate between two buffers, the last one writing ``out``
    when given (one buffer allocated, not two and a copy)."""
    passes = 1 + max(0, (len(deltas) - 1).bit_length() - 1)  # steps 1, 2, 4, ... < H
    src = np.empty(deltas.shape, np.uint8)
    dst = np.empty_like(src) if out is None else out
    if out is not None and passes % 2:  # the first pass writes out when the count is odd
        src, dst = dst, src
    # the first step reads the rows where they lie (a strided view past each filter
    # byte): no copy to make them contiguous first
    src[:1] = deltas[:1]
    np.add(deltas[1:], deltas[:-1], out=src[1:])
    step = 2
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


def _idat(data: bytes) -> list[memoryview] | None:
    """The IDAT chunks' payloads (views into ``data``), None past an unknown critical chunk."""
    view = memoryview(data)  # IDAT chunks are sliced from it, not copied
    idat = []
    pos = 33
    while pos + 8 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat.append(view[pos + 8 : pos + 8 + length])
        elif kind == b"IEND":
            break
        elif kind[0] & 0x20 == 0:  # an unknown critical chunk (e.g. PLTE): libpng's job
            return None
        pos += 12 + length
    return idat


def _decode_up(data: bytes, out: np.ndarray | None = None) -> np.ndarray | None:
    """:func:`decode`'s own path (UP or unfiltered rows), None for libpng's; the pixels
    written into ``out`` when given (it holds the PNG: :func:`_holds`)."""
    header = png_header(data)
    rows = _inflated_rows(data, header)
    if rows is None or header is None:
        return None
    w, h, depth, color, _ = header
    filters = rows[:, 0]
    target = None if out is None else out.reshape(-1).view(np.uint8).reshape(rows[:, 1:].shape)
    if filters.any():
        # UP on the first row is no filter (the row above is zeros): one cumulative sum
        if not (filters[1:] == _FILTER_UP).all() or filters[0] not in (0, _FILTER_UP):
            return None
        pixels = _prefix_rows(rows[:, 1:], target)
    elif target is not None:
        target[...] = rows[:, 1:]
        pixels = target
    else:
        pixels = rows[:, 1:]
    if out is not None:
        if depth == 16 and not np.dtype(">u2").isnative:
            out.byteswap(inplace=True)  # the rows are big-endian
        return out
    dtype = np.dtype(">u2") if depth == 16 else np.dtype(np.uint8)
    img = pixels.view(dtype).astype(dtype.newbyteorder("="), copy=False)
    channels = _CHANNELS[color]
    return img.reshape((h, w) if channels == 1 else (h, w, channels))


def _inflated_rows(data: bytes, header: tuple[int, int, int, int, int] | None) -> np.ndarray | None:
    """The filtered rows of a non-interlaced 8- or 16-bit PNG (each led by its filter
    byte), inflated by ISA-L; None for anything libpng should decode."""
    if header is None:
        return None
    w, h, depth, color, interlace = header
    if interlace or depth not in (8, 16) or color not in _CHANNELS or not w or not h:
        return None
    idat = _idat(data)
    if not idat:
        return None
    row_bytes = w * _CHANNELS[color] * depth // 8
    size = h * (row_bytes + 1)
    try:
        # at most one byte past the rows: a small IDAT that inflates to gigabytes (a
        # deflate bomb under an honest IHDR) is left to libpng, which stops at the last row
        inflate = isal_zlib.decompressobj()
        stream = idat[0] if len(idat) == 1 else b"".join(idat)  # one IDAT: what fpng writes
        raw = inflate.decompress(stream, size + 1)
    except Exception:  # noqa: BLE001 - let libpng produce the precise error
        return None
    if len(raw) != size or not inflate.eof:
        return None
    return np.frombuffer(raw, np.uint8).reshape(h, row_bytes + 1)
