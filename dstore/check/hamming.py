"""Pairs of 64-bit hashes within a Hamming radius, without comparing all pairs.

Multi-index hashing (Norouzi, Punjani and Fleet, "Fast search in Hamming space
with multi-index hashing", CVPR 2012): the 64 bits are cut into ``m``
substrings; two hashes at most ``r`` bits apart differ in at most ``r // m``
bits of one of the substrings (pigeonhole). So for each substring, each hash
is looked up, in the sorted substrings of all hashes, under every pattern of
at most ``r // m`` flipped bits; the candidates found are then measured on all
64 bits. ``m`` is chosen for the number of hashes: long substrings keep the
buckets small, short ones keep the flip patterns few.

Everything is numpy over all hashes at once, one flip pattern at a time, in
chunks bounded by :data:`CHUNK_PAIRS` candidate pairs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

from .perceptual import hamming

__all__ = ["near_pairs"]

#: candidate pairs held at once (three int64 arrays of this length)
CHUNK_PAIRS = 1 << 22


#: the longest substring, in bits: its bucket table has 2**bits + 1 entries (int64)
MAX_WIDTH = 22


def _substrings(count: int, radius: int) -> int:
    """The number of substrings that makes the least work for ``count`` hashes: per
    hash and substring, the flip patterns times the bucket each finds."""

    def work(m: int) -> float:
        bits = -(-64 // m)
        patterns = sum(math.comb(bits, k) for k in range(radius // m + 1))
        return m * patterns * (1 + count / 2.0**bits)

    least = -(-64 // MAX_WIDTH)
    return min(range(least, max(least, min(radius + 1, 16)) + 1), key=work)


def _bit_slices(m: int) -> list[tuple[int, int]]:
    """``(shift, width)`` of each of ``m`` substrings covering the 64 bits."""
    edges = [round(i * 64 / m) for i in range(m + 1)]
    return [(lo, hi - lo) for lo, hi in itertools.pairwise(edges)]


def _flips(width: int, most: int) -> Iterator[int]:
    """Every mask of ``width`` bits with at most ``most`` bits set."""
    for k in range(most + 1):
        for bits in itertools.combinations(range(width), k):
            yield sum(1 << b for b in bits)


def _matches(
    keys: np.ndarray, order: np.ndarray, starts: np.ndarray, mask: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(i, j) index pairs, i < j, whose keys differ by exactly ``mask``; ``order`` sorts
    the keys and ``starts[k]`` is where key ``k`` starts in that order (a bucket table:
    one lookup per hash, no search)."""
    wanted = keys ^ np.uint64(mask)
    lo = starts[wanted]
    found = starts[wanted + np.uint64(1)] - lo
    (queries,) = np.nonzero(found)
    start = 0
    while start < len(queries):
        # as many queries as keep the candidates of this chunk under CHUNK_PAIRS
        counts = found[queries[start:]]
        stop = start + max(1, int(np.searchsorted(np.cumsum(counts), CHUNK_PAIRS)))
        q = queries[start:stop]
        n = found[q]
        i = np.repeat(q, n)
        # positions lo[q] .. lo[q]+n[q]-1 in sorted order, for each query in turn
        first = np.repeat(lo[q] - np.cumsum(n) + n, n)
        j = order[first + np.arange(len(i))]
        keep = i < j
        yield i[keep], j[keep]
        start = stop


def near_pairs(hashes: np.ndarray, radius: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)``, i < j, of distinct ``hashes`` (uint64, no two equal) at most
    ``radius`` bits apart, and their distances, each pair once."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    empty = np.zeros(0, np.int64)
    if radius <= 0 or len(hashes) < 2:
        return empty, empty, empty.astype(np.uint8)
    radius = min(radius, 64)
    m = _substrings(len(hashes), radius)
    found: list[np.ndarray] = []
    for shift, width in _bit_slices(m):  # widths <= MAX_WIDTH
        keys = (hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        order = np.argsort(keys, kind="stable")
        starts = np.zeros((1 << width) + 1, np.int64)
        np.cumsum(np.bincount(keys.astype(np.int64), minlength=1 << width), out=starts[1:])
        for mask in _flips(width, radius // m):
            for i, j in _matches(keys, order, starts, mask):
                close = hamming(hashes[i], hashes[j]) <= radius
                found.append(i[close] * len(hashes) + j[close])
    if not found:
        return empty, empty, empty.astype(np.uint8)
    pairs = np.unique(np.concatenate(found))
    i, j = pairs // len(hashes), pairs % len(hashes)
    return i, j, hamming(hashes[i], hashes[j])
