"""Near-duplicate feature vectors: cosine similarity above a threshold, found by
random-projection LSH instead of comparing all pairs.

Each vector is kept as a 128-d random projection of its unit vector (float16,
256 bytes a record whatever its width: a million 1280-d vectors take 256 MB,
not 2.5 GB), which preserves angles (Johnson-Lindenstrauss): the cosine of two
projections estimates the cosine of the vectors, and does so closely for the
close pairs that matter (docs/check.md has the measured error).

Candidates come from sign-random-projection hashing (SimHash, Charikar 2002)
of the projections, centred on their mean: two vectors share each sign bit
with probability ``1 - angle / pi``, so near-duplicates share long prefixes of
their 64 sign bits in some of :data:`TABLES` tables. As in Charikar's search,
each table's order sorts the vectors by their bits, and each vector is
compared with the :data:`WINDOW` after it: one vectorised product per offset,
however dense the data (a dense region has long shared prefixes, not huge
buckets).
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


def _normalise(proj: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Scale ``proj[rows]`` to unit length in place; which of ``rows`` have a direction."""
    valid = np.zeros(len(proj), bool)
    for lo in range(0, len(rows), _ROWS):
        at = rows[lo : lo + _ROWS]
        p = proj[at].astype(np.float32)
        n = np.linalg.norm(p, axis=1)
        ok = n > 0
        p[ok] /= n[ok, None]
        proj[at] = p
        valid[at[ok]] = True
    return valid


def _table_order(unit: np.ndarray, members: np.ndarray, centre: np.ndarray, t: int) -> np.ndarray:
    """``members`` sorted by 64 sign bits of their centred rows in table ``t``."""
    planes = _gaussian(PROJECTION_DIMS, 64, 2 + t)
    sig = np.empty(len(members), np.uint64)
    for lo in range(0, len(members), _ROWS):
        bits = (unit[members[lo : lo + _ROWS]].astype(np.float32) - centre) @ planes > 0
        sig[lo : lo + _ROWS] = np.packbits(bits, axis=1).view(">u8").ravel()
    return members[np.argsort(sig, kind="stable")]


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


def cosine_pairs(
    proj: np.ndarray, threshold: float, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(i, j)``, i < j, of ``rows`` of ``proj`` (from :func:`project`; default: all)
    whose estimated cosine is at least ``threshold``, and that cosine, each pair once.

    ``proj[rows]`` is scaled to unit length in place (no copy of a table that may
    hold a million rows)."""
    rows = np.arange(len(proj)) if rows is None else np.asarray(rows)
    valid = _normalise(proj, rows)
    members = np.flatnonzero(valid)
    empty = np.zeros(0, np.int64)
    if len(members) < 2:
        return empty, empty, np.zeros(0, np.float32)
    centre = np.zeros(PROJECTION_DIMS, np.float64)
    for lo in range(0, len(members), _ROWS):
        centre += proj[members[lo : lo + _ROWS]].astype(np.float64).sum(axis=0)
    centre = (centre / len(members)).astype(np.float32)
    found = [empty]
    for t in range(TABLES):
        found += _window_pairs(_table_order(proj, members, centre, t), proj, threshold)
    pairs = np.unique(np.concatenate(found))
    i, j = pairs // len(proj), pairs % len(proj)
    cos = np.einsum("ij,ij->i", proj[i].astype(np.float32), proj[j].astype(np.float32))
    return i, j, cos
