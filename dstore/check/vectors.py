"""Near-duplicate feature vectors: cosine similarity above a threshold, found by
random-projection LSH instead of comparing all pairs.

Each vector is kept as a 128-d random projection of its unit vector (float16,
256 bytes a record whatever its width: a million 1280-d vectors take 256 MB,
not 2.5 GB), which preserves angles (Johnson-Lindenstrauss): the cosine of two
projections estimates the cosine of the vectors, and does so closely for the
close pairs that matter (docs/check.md has the measured error).

Candidates come from sign-random-projection hashing (SimHash, Charikar 2002)
of the projections, centred on their mean: two vectors share each sign bit
with probability ``1 - angle / pi``, so near-duplicates share a bucket key of
``b`` bits in one of :data:`TABLES` tables, while the rest rarely do. The bits
are as many as give buckets of about :data:`BUCKET` vectors; a bucket still
larger than :data:`MAX_BUCKET` (many vectors in one direction) is cut further
with more bits. Each bucket's pairs are then compared by one matrix product.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["PROJECTION_DIMS", "cosine_pairs", "project"]

#: dimensions of the random projection kept per vector
PROJECTION_DIMS = 128
TABLES = 16
#: each vector is compared with the next WINDOW in each table's order
WINDOW = 16
#: rows projected or hashed at once (bounds the float32 temporaries)
_ROWS = 1 << 14


@functools.lru_cache(maxsize=8)
def _gaussian(rows: int, cols: int, seed: int) -> np.ndarray:
    """A fixed Gaussian matrix: the same projection in every run and process."""
    rng = np.random.default_rng([seed, rows, cols])
    return rng.standard_normal((rows, cols), dtype=np.float32)


def project(vectors: np.ndarray) -> np.ndarray:
    """``(n, PROJECTION_DIMS)`` float16: the projection of each vector's direction;
    zeros for a vector with no direction (all zeros, or not finite)."""
    x = np.asarray(vectors).reshape(len(vectors), -1).astype(np.float32)
    norms = np.linalg.norm(x, axis=1)
    ok = np.isfinite(norms) & (norms > 0)
    x[~ok] = 0
    x[ok] /= norms[ok, None]
    out = x @ (_gaussian(x.shape[1], PROJECTION_DIMS, 1) / math.sqrt(PROJECTION_DIMS))
    return out.astype(np.float16)


def _unit_rows(proj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The projections scaled to unit length (float16), and which rows have a direction."""
    out = np.empty_like(proj, dtype=np.float16)
    valid = np.zeros(len(proj), bool)
    for lo in range(0, len(proj), _ROWS):
        p = proj[lo : lo + _ROWS].astype(np.float32)
        n = np.linalg.norm(p, axis=1)
        ok = n > 0
        p[ok] /= n[ok, None]
        out[lo : lo + _ROWS] = p
        valid[lo : lo + _ROWS] = ok
    return out, valid


def _signatures(unit: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``(n, TABLES)`` uint64: 64 sign bits per table of each centred unit projection."""
    planes = _gaussian(PROJECTION_DIMS, 64 * TABLES, 2)
    centre = unit[valid].astype(np.float32).mean(axis=0) if valid.any() else 0.0
    sig = np.empty((len(unit), TABLES), np.uint64)
    for lo in range(0, len(unit), _ROWS):
        bits = (unit[lo : lo + _ROWS].astype(np.float32) - centre) @ planes > 0
        packed = np.packbits(bits.reshape(len(bits), TABLES, 64), axis=2)
        sig[lo : lo + _ROWS] = packed.view(">u8").reshape(len(bits), TABLES)
    return sig


def _window_pairs(order: np.ndarray, unit: np.ndarray, threshold: float) -> list[np.ndarray]:
    """``i * n + j`` codes (i < j) of the pairs at most :data:`WINDOW` apart in ``order``
    whose cosine is at least ``threshold``: float32 chunks of the sorted rows, each
    with the :data:`WINDOW` rows after it, every offset one vectorised product."""
    n = len(unit)
    found = []
    for lo in range(0, len(order), _ROWS):
        idx = order[lo : lo + _ROWS + WINDOW]
        rows = unit[idx].astype(np.float32)
        own = min(_ROWS, len(order) - lo)
        for off in range(1, min(WINDOW, len(idx) - 1) + 1):
            m = min(own, len(idx) - off)
            cos = np.einsum("ij,ij->i", rows[:m], rows[off : off + m])
            (at,) = np.nonzero(cos >= threshold)
            a, b = idx[at], idx[at + off]
            found.append(np.minimum(a, b).astype(np.int64) * n + np.maximum(a, b))
    return found


def cosine_pairs(proj: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)``, i < j, of rows of ``proj`` (from :func:`project`) whose
    estimated cosine is at least ``threshold``, and that cosine, each pair once."""
    unit, valid = _unit_rows(proj)
    empty = np.zeros(0, np.int64)
    if valid.sum() < 2:
        return empty, empty, np.zeros(0, np.float32)
    sig = _signatures(unit, valid)
    members = np.flatnonzero(valid)
    found = [empty]
    for t in range(TABLES):
        order = members[np.argsort(sig[members, t], kind="stable")]
        found += _window_pairs(order, unit, threshold)
        del order
    pairs = np.unique(np.concatenate(found))
    i, j = pairs // len(unit), pairs % len(unit)
    cos = np.einsum("ij,ij->i", unit[i].astype(np.float32), unit[j].astype(np.float32))
    return i, j, cos
