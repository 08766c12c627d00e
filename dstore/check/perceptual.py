"""The 64-bit perceptual hash (pHash) of image batches, in numpy.

Both follow the definitions of the ``imagehash`` package (``phash``: the 8x8
lowest frequencies of the DCT of a 32x32 grey image, each bit "above the
median"; ``dhash``: a 9x8 grey image, each bit "brighter than its left
neighbour"), which a test compares them with. They differ from it in the
resampling only: a box (area) mean over each output pixel's block instead of
Pillow's Lanczos filter, computed for a whole batch at once.

A uniform brightness shift leaves both unchanged (the DCT's constant term is
the only coefficient it moves, and pHash's median never falls on it); JPEG
re-encoding moves a few bits. docs/check.md has the measured distances.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["grey_thumbnails", "hamming", "phash", "popcount"]

#: ITU-R 601-2 luma, as Pillow's ``convert("L")`` weighs R, G and B
_LUMA = np.array([0.299, 0.587, 0.114])


def _box_edges(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Each output pixel's block ``[lo, hi)`` of ``size`` input pixels (at least one)."""
    lo = (np.arange(out) * size) // out
    hi = np.maximum(lo + 1, (np.arange(1, out + 1) * size) // out)
    return lo, hi


def _accumulator(dtype: np.dtype, k: int) -> np.dtype:
    """The narrowest dtype that holds a sum of ``k`` values of ``dtype`` exactly."""
    if dtype.kind == "u" and (np.iinfo(dtype).max * k) < 2**16:
        return np.dtype(np.uint16)
    if dtype.kind in "ub" and (np.iinfo(dtype).max * k) < 2**32:
        return np.dtype(np.uint32)
    return np.dtype(np.float64)


def _box_sum(x: np.ndarray, axis: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """``x`` resampled to ``out`` pixels along ``axis``: the sum of each block, and the
    pixels each block holds (to divide by)."""
    size = x.shape[axis]
    if size % out == 0:  # the common case (256 -> 32): adds of strided views, no copy
        k = size // out
        blocks = x.reshape(*x.shape[:axis], out, k, *x.shape[axis + 1 :])
        pick: list[slice | int] = [slice(None)] * blocks.ndim
        pick[axis + 1] = 0
        total = blocks[tuple(pick)].astype(_accumulator(x.dtype, k))
        for i in range(1, k):
            pick[axis + 1] = i
            total += blocks[tuple(pick)]
        return total, np.full(out, k)
    lo, hi = _box_edges(size, out)
    sums = np.cumsum(x, axis=axis, dtype=np.float64)
    sums = np.concatenate([np.zeros_like(np.take(sums, [0], axis=axis)), sums], axis=axis)
    return np.take(sums, hi, axis=axis) - np.take(sums, lo, axis=axis), hi - lo


def grey_thumbnails(images: np.ndarray, height: int, width: int) -> np.ndarray:
    """``(n, height, width)`` float32 grey thumbnails of ``(n, H, W[, C])`` images.

    Colour is reduced after the resampling (both are linear): the luma of the first
    three channels (an alpha channel is left out), or the only channel."""
    x = images
    if x.ndim == 3:
        x = x[..., None]
    if x.shape[-1] >= 3:
        x = x[..., :3]
    elif x.shape[-1] == 2:  # grey + alpha
        x = x[..., :1]
    x, rows = _box_sum(x, 1, height)
    x, cols = _box_sum(x, 2, width)
    area = (rows[:, None] * cols[None, :]).astype(np.float32)
    if x.shape[-1] == 3:
        grey = np.tensordot(x.astype(np.float32), _LUMA.astype(np.float32), axes=([3], [0]))
    else:
        grey = x[..., 0].astype(np.float32)
    return grey / area


@functools.lru_cache(maxsize=4)
def _dct_matrix(n: int) -> np.ndarray:
    """The DCT-II as a matrix (unscaled: only comparisons of coefficients are used)."""
    k = np.arange(n)[:, None]
    return np.cos(np.pi * (2 * np.arange(n)[None, :] + 1) * k / (2 * n)).astype(np.float32)


def _pack(bits: np.ndarray) -> np.ndarray:
    """``(n, 64)`` booleans -> ``(n,)`` uint64, the first bit the most significant."""
    packed = np.packbits(bits.reshape(len(bits), 64), axis=1)
    return packed.view(">u8").reshape(-1).astype(np.uint64)


def phash(images: np.ndarray) -> np.ndarray:
    """The 64-bit pHash of each image of a ``(n, H, W[, C])`` batch, as uint64."""
    if len(images) == 0:
        return np.zeros(0, np.uint64)
    grey = grey_thumbnails(images, 32, 32)
    c = _dct_matrix(32)[:8]
    low = np.einsum("ij,njk,lk->nil", c, grey, c, optimize=True).reshape(len(grey), 64)
    return _pack(low > np.median(low, axis=1, keepdims=True))


_POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def popcount(x: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 (``np.bitwise_count`` where numpy has it)."""
    x = np.asarray(x, dtype=np.uint64)
    count = getattr(np, "bitwise_count", None)
    if count is not None:
        return np.asarray(count(x)).astype(np.uint8)
    octets = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    return _POPCOUNT8[octets].reshape(*x.shape, 8).sum(axis=-1, dtype=np.uint8)


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bits that differ between the uint64 hashes ``a`` and ``b`` (broadcast)."""
    return popcount(np.bitwise_xor(a, b))
