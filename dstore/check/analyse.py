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

from ..errors import UsageError
from .collect import Collector
from .hamming import near_pairs
from .vectors import PROJECTION_DIMS, cosine_pairs

__all__ = ["Analysis", "analyse", "training_split"]

_ONE = np.uint64(1)


def training_split(splits: list[str]) -> str:
    """The split others are compared with: ``train`` (or ``training``), else the first."""
    return next((s for s in splits if s in ("train", "training")), splits[0])


@dataclass
class Records:
    """Every record of every split, the training split first, then the others in order."""

    splits: list[str]
    split_id: np.ndarray  # (N,) int64
    index: np.ndarray  # (N,) int64, the position within its split
    digest: np.ndarray  # (N, 2) uint64
    label: np.ndarray  # (N,) uint64
    has_label: np.ndarray  # (N,) bool
    images: dict[str, tuple[np.ndarray, np.ndarray]]  # field -> hashes, present
    vectors: dict[str, tuple[np.ndarray, np.ndarray]]  # field -> projections, present


def gather(collector: Collector) -> Records:
    """The collector's hashes as one table (each split's parts released once copied)."""
    names = list(collector.schema.splits)
    train = training_split(names)
    splits = [train, *(s for s in names if s != train)]
    if len(splits) > 64:
        raise UsageError(f"{collector.where}: {len(splits)} splits; dstore check takes 64 at most")
    counts = [collector.schema.splits[s].count for s in splits]
    total = sum(counts)
    f = collector.fields
    rec = Records(
        splits=splits,
        split_id=np.repeat(np.arange(len(splits)), counts),
        index=np.concatenate([np.arange(c) for c in counts]) if total else np.zeros(0, np.int64),
        digest=np.zeros((total, 2), np.uint64),
        label=np.zeros(total, np.uint64),
        has_label=np.zeros(total, bool),
        images={n: (np.zeros(total, np.uint64), np.zeros(total, bool)) for n in f.images},
        vectors={
            n: (np.zeros((total, PROJECTION_DIMS), np.float16), np.zeros(total, bool))
            for n in f.vectors
        },
    )
    lo = 0
    for name, count in zip(splits, counts, strict=True):
        part = collector.take(name)
        hi = lo + count
        if part is None:
            continue
        rec.digest[lo:hi] = part.digest
        rec.label[lo:hi] = part.label
        rec.has_label[lo:hi] = any(n in collector.schema.splits[name].fields for n in f.labels)
        for table, mine in ((rec.images, part.images), (rec.vectors, part.vectors)):
            for field, values in mine.items():
                table[field][0][lo:hi] = values
                table[field][1][lo:hi] = True
        lo = hi
    return rec


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
    # every record its own node, all present: the table itself, not a copy of it
    same = len(nodes) == len(proj) and np.array_equal(reps[nodes], np.arange(len(proj)))
    rows = proj if same else proj[reps[nodes]]
    i, j, cos = cosine_pairs(rows, cosine)
    a, b = nodes[i], nodes[j]
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
