"""From the hashes of every record to duplicate pairs, leakage between splits,
label conflicts and groups.

Records with equal digests form one *node* (an exact group, its first record
its representative; the training split comes first, so a group that has a
training record is represented by one). Near-duplicate relations are found
between nodes: equal or close pHashes of an image field (Hamming distance at
most ``radius``, :func:`.hamming.near_pairs` on the distinct hashes), or an
estimated cosine of a vector field of at least ``cosine``
(:func:`.vectors.cosine_pairs`). Which splits a record is related to is kept
as a bit mask per node, so leakage counts never enumerate the pairs inside a
large group of equal hashes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .collect import Records
from .hamming import near_pairs
from .vectors import cosine_pairs

__all__ = ["Analysis", "analyse"]

_ONE = np.uint64(1)


@dataclass
class Analysis:
    """What :func:`analyse` found; record numbers are rows of its :class:`Records`."""

    records: Records
    node_of: np.ndarray  # (N,) node of each record
    reps: np.ndarray  # (nodes,) its first record
    node_mask: np.ndarray  # (nodes,) uint64: the splits of its records
    near_mask: np.ndarray  # (nodes,) uint64: the splits of the records it nearly duplicates
    edges: tuple[np.ndarray, np.ndarray, np.ndarray]  # near pairs of nodes, distance
    radius: int
    cosine: float

    def exact_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(first record of the group, another record of it), for every other record."""
        rep = self.reps[self.node_of]
        others = np.flatnonzero(rep != np.arange(len(rep)))
        return rep[others], others

    def near_pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(record, record, distance) of the representatives of nearly equal nodes."""
        a, b, d = self.edges
        ra, rb = self.reps[a], self.reps[b]
        return np.minimum(ra, rb), np.maximum(ra, rb), d

    def labels_differ(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        r = self.records
        return r.has_label[a] & r.has_label[b] & (r.label[a] != r.label[b])

    def related_splits(self) -> tuple[np.ndarray, np.ndarray]:
        """Per record, the other splits it duplicates exactly, and exactly or nearly (masks)."""
        bit = _ONE << self.records.split_id.astype(np.uint64)
        exact = self.node_mask[self.node_of] & ~bit
        return exact, exact | (self.near_mask[self.node_of] & ~bit)

    def components(self) -> np.ndarray:
        """The group of each node: nodes joined by near pairs, transitively."""
        comp = np.arange(len(self.reps))
        a, b, _ = self.edges
        while len(a):
            low = np.minimum(comp[a], comp[b])
            before = comp.copy()
            np.minimum.at(comp, a, low)
            np.minimum.at(comp, b, low)
            comp = comp[comp]
            if np.array_equal(comp, before):
                break
        return comp


def _nodes(rec: Records) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact groups: node of each record, first record of each node, split masks."""
    if len(rec.digest) == 0:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0, np.uint64)
    keys = np.ascontiguousarray(rec.digest).view(np.dtype((np.void, 16))).ravel()
    _, reps, node_of = np.unique(keys, return_index=True, return_inverse=True)
    # nodes numbered in the order of their first records: with no exact duplicate,
    # node k is record k (and the vector tables need no copy in node order)
    order = np.argsort(reps, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    reps, node_of = reps[order], rank[node_of.ravel()]
    mask = np.zeros(len(reps), np.uint64)
    np.bitwise_or.at(mask, node_of, _ONE << rec.split_id.astype(np.uint64))
    return node_of, reps, mask


def _image_edges(
    hashes: np.ndarray, present: np.ndarray, reps: np.ndarray, mask: np.ndarray, radius: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Node pairs with equal or close hashes (a star per set of equal hashes), and per
    node the splits of every node whose hash is within ``radius`` of its own."""
    nodes = np.flatnonzero(present[reps])
    near = np.zeros(len(reps), np.uint64)
    if len(nodes) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, near
    values, first, inv = np.unique(hashes[reps[nodes]], return_index=True, return_inverse=True)
    inv = inv.ravel()
    vmask = np.zeros(len(values), np.uint64)
    np.bitwise_or.at(vmask, inv, mask[nodes])
    same = np.flatnonzero(first[inv] != np.arange(len(nodes)))
    iu, ju, dist = near_pairs(values, radius)
    nmask = vmask.copy()
    np.bitwise_or.at(nmask, iu, vmask[ju])
    np.bitwise_or.at(nmask, ju, vmask[iu])
    near[nodes] = nmask[inv]
    a = np.concatenate([nodes[first[inv[same]]], nodes[first[iu]]])
    b = np.concatenate([nodes[same], nodes[first[ju]]])
    d = np.concatenate([np.zeros(len(same)), dist.astype(np.float64)])
    return a, b, d, near


def _vector_edges(
    proj: np.ndarray, present: np.ndarray, reps: np.ndarray, mask: np.ndarray, cosine: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Node pairs whose vectors' estimated cosine is at least ``cosine`` (distance
    1 - cosine), and per node the splits of the nodes it is paired with."""
    nodes = np.flatnonzero(present[reps])
    near = np.zeros(len(reps), np.uint64)
    # the rows of the nodes' first records, in the table itself (never a copy of it);
    # node k's first record is reps[k], and reps increase
    i, j, cos = cosine_pairs(proj, cosine, reps[nodes])
    a, b = np.searchsorted(reps, i), np.searchsorted(reps, j)
    np.bitwise_or.at(near, a, mask[b])
    np.bitwise_or.at(near, b, mask[a])
    # an estimate may pass 1 by a little: distance 0, not below
    return a, b, np.round(1.0 - np.minimum(cos.astype(np.float64), 1.0), 6), near


def analyse(rec: Records, radius: int, cosine: float) -> Analysis:
    """Exact groups, near pairs (``radius`` bits of pHash, ``cosine`` of vectors) and
    the split masks the leakage counts come from."""
    node_of, reps, mask = _nodes(rec)
    near = np.zeros(len(reps), np.uint64)
    found = []
    for hashes, present in rec.images.values():
        *edges, field_near = _image_edges(hashes, present, reps, mask, radius)
        found.append(edges)
        near |= field_near
    for proj, present in rec.vectors.values():
        *edges, field_near = _vector_edges(proj, present, reps, mask, cosine)
        found.append(edges)
        near |= field_near
    a, b, d = (np.concatenate(x) for x in zip(*found, strict=True)) if found else _no_edges()
    lo, hi = np.minimum(a, b).astype(np.int64), np.maximum(a, b).astype(np.int64)
    # one pair per two nodes (the first found: images before vectors)
    _, keep = np.unique(lo * max(1, len(reps)) + hi, return_index=True)
    keep = keep[lo[keep] != hi[keep]]
    return Analysis(rec, node_of, reps, mask, near, (lo[keep], hi[keep], d[keep]), radius, cosine)


def _no_edges() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z = np.zeros(0, np.int64)
    return z, z, np.zeros(0)
