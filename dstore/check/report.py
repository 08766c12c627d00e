"""The report of ``dstore check``: the JSON object, the human table, the summary line.

JSON (``CheckReport.to_json``)::

    {"duplicates": [{"kind": "exact"|"near", "a": {"split": S, "index": I},
                     "b": {"split": S, "index": I}, "distance": D,
                     "labels_differ": bool}, ...],
     "summary": {...}}

``a`` is the first record of a group (the training split first), ``b`` another;
indexes are record positions within their split. ``distance`` is 0 for exact
pairs, the Hamming distance of the pHashes for near images, and 1 - cosine
for near vectors. An exact group of k records gives k - 1 pairs (each record to
the first); near pairs join the first records of two groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .analyse import Analysis
from .fields import CheckFields

__all__ = ["CheckReport", "build_report"]

#: groups the summary lists, the largest that span most splits first
WORST_GROUPS = 10


@dataclass
class CheckReport:
    """What ``dstore check`` found in ``path``."""

    path: str
    fields: CheckFields
    radius: int
    cosine: float
    records: dict[str, int]
    training: str
    duplicates: list[dict[str, Any]]
    #: per split, per other split: {"records", "exact", "near", "percent"}
    leakage: dict[str, dict[str, dict[str, float]]]
    within: dict[str, dict[str, int]]  # per split: exact / near pairs inside it
    label_conflicts: dict[str, int]
    groups: list[dict[str, Any]] = field(default_factory=list)

    @property
    def leaked(self) -> bool:
        """True when a record of one split duplicates (exactly or nearly) one of another."""
        return any(c["records"] for per in self.leakage.values() for c in per.values())

    @property
    def exit_code(self) -> int:
        return 1 if self.leaked else 0

    def summary(self) -> dict[str, Any]:
        exact = sum(1 for d in self.duplicates if d["kind"] == "exact")
        return {
            "path": self.path,
            "records": dict(self.records),
            "training_split": self.training,
            "fields": self.fields.to_json(),
            "near": {"hamming": self.radius, "cosine": self.cosine},
            "pairs": {"exact": exact, "near": len(self.duplicates) - exact},
            "leakage": self.leakage,
            "leaked": self.leaked,
            "within_splits": self.within,
            "label_conflicts": self.label_conflicts,
            "groups": self.groups,
        }

    def to_json(self) -> dict[str, Any]:
        return {"duplicates": self.duplicates, "summary": self.summary()}

    def summary_line(self) -> str:
        """One line: the records of each split that duplicate the training split's
        (and any other split's), or that none does."""
        leaks = [
            (split, other, c)
            for split, per in self.leakage.items()
            if split != self.training  # the evaluation splits' view of each leak
            for other, c in per.items()
            if c["records"]
        ]
        # one leak in words; several in short form (bench prints this beside its plan,
        # and three splits made a line of 400 characters): the table has the rest
        parts = [
            f"{c['records']} of {self.records[split]} {split} records "
            f"({c['percent']:.1f}%) duplicate {other} records "
            f"(exact {c['exact']}, near {c['near']})"
            if len(leaks) == 1
            else f"{split} {c['records']}/{self.records[split]} ({c['percent']:.1f}%) dup {other}"
            for split, other, c in leaks
        ]
        within = sum(w["exact"] + w["near"] for w in self.within.values())
        line = "check: " + ("; ".join(parts) if parts else "no duplicates across splits")
        line += f"; {within} duplicate pair(s) within splits"
        conflicts = self.label_conflicts["exact"] + self.label_conflicts["near"]
        if conflicts:
            line += f"; {conflicts} with other labels"
        return line

    def lines(self) -> list[str]:
        """The human table: per split, the records that duplicate another split's."""
        f = self.fields
        how = [f"exact: {', '.join(f.exact)}"]
        if f.images:
            how.append(f"pHash within {self.radius} bits: {', '.join(f.images)}")
        if f.vectors:
            how.append(f"cosine >= {self.cosine:g}: {', '.join(f.vectors)}")
        out = [
            f"{self.path}: {sum(self.records.values())} records in {len(self.records)} "
            f"split(s); {'; '.join(how)}; labels: {', '.join(f.labels) or 'none'}",
            "",
            f"{'split':<12} {'records':>8}  {'duplicates of':<14} {'records':>8} "
            f"{'%':>6} {'exact':>7} {'near':>6}   within split (exact/near pairs)",
        ]
        for split, count in self.records.items():
            # the training split's leaks are the evaluation splits' rows
            per = self.leakage.get(split, {}) if split != self.training else {}
            within = self.within.get(split, {"exact": 0, "near": 0})
            inside = f"{within['exact']}/{within['near']}"
            rows: list[tuple[str, dict[str, float] | None]] = [
                (o, c) for o, c in per.items() if c["records"]
            ] or [("-", None)]
            for k, (other, c) in enumerate(rows):
                head = f"{split:<12} {count:>8}" if k == 0 else " " * 21
                if c is None:
                    out.append(f"{head}  {'-':<14} {0:>8} {0.0:>6.1f} {0:>7} {0:>6}   {inside}")
                else:
                    out.append(
                        f"{head}  {other:<14} {c['records']:>8} {c['percent']:>6.1f} "
                        f"{c['exact']:>7} {c['near']:>6}   {inside if k == 0 else ''}".rstrip()
                    )
        lc = self.label_conflicts
        if lc["exact"] or lc["near"]:
            out += [
                "",
                f"label conflicts: {lc['exact']} exact and {lc['near']} near pair(s) "
                "whose labels differ (a labelling error, not only a leak)",
            ]
        if self.groups:
            out += ["", "largest groups (records joined by duplicate pairs):"]
            for g in self.groups[:5]:
                splits = ", ".join(f"{s} {n}" for s, n in g["splits"].items())
                first = g["first"]
                out.append(
                    f"  {g['records']:>6} records ({splits}), {g['labels']} label(s); "
                    f"first: {first['split']}[{first['index']}]"
                )
        out += ["", self.summary_line()]
        return out


def _ref(rec: Any, row: int) -> dict[str, Any]:
    return {"split": rec.splits[int(rec.split_id[row])], "index": int(rec.index[row])}


def _pairs(an: Analysis) -> list[dict[str, Any]]:
    rec = an.records
    a, b = an.exact_pairs()
    na, nb, nd = an.near_pairs()
    out = []
    for kind, xs, ys, ds in (("exact", a, b, np.zeros(len(a))), ("near", na, nb, nd)):
        differ = an.labels_differ(xs, ys)
        for x, y, d, lab in zip(
            xs.tolist(), ys.tolist(), ds.tolist(), differ.tolist(), strict=True
        ):
            out.append(
                {
                    "kind": kind,
                    "a": _ref(rec, x),
                    "b": _ref(rec, y),
                    "distance": int(d) if float(d).is_integer() else d,
                    "labels_differ": bool(lab),
                }
            )
    return out


def _leakage(an: Analysis) -> dict[str, dict[str, dict[str, float]]]:
    rec = an.records
    exact, anyhow = an.related_splits()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for s, split in enumerate(rec.splits):
        rows = rec.split_id == s
        n = int(rows.sum())
        out[split] = {}
        for t, other in enumerate(rec.splits):
            if t == s:
                continue
            bit = np.uint64(1) << np.uint64(t)
            k_exact = int(np.count_nonzero(exact[rows] & bit))
            k_any = int(np.count_nonzero(anyhow[rows] & bit))
            out[split][other] = {
                "records": k_any,
                "exact": k_exact,
                "near": k_any - k_exact,
                "percent": round(100.0 * k_any / n, 3) if n else 0.0,
            }
    return out


def _within(an: Analysis, pairs: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out = {s: {"exact": 0, "near": 0} for s in an.records.splits}
    for p in pairs:
        if p["a"]["split"] == p["b"]["split"]:
            out[p["a"]["split"]][p["kind"]] += 1
    return out


def _groups(an: Analysis) -> list[dict[str, Any]]:
    """The groups of two or more records, those spanning most splits and largest first."""
    rec = an.records
    comp = an.components()[an.node_of]
    rows = np.flatnonzero(np.bincount(comp, minlength=len(an.reps))[comp] > 1)
    if len(rows) == 0:
        return []
    # per group: records and splits spanned, ranked without a loop over the groups
    groups, size = np.unique(comp[rows], return_counts=True)
    spans = np.unique(comp[rows] * 64 + rec.split_id[rows]) // 64
    span = np.searchsorted(groups, spans)
    width = np.bincount(span, minlength=len(groups))
    best = groups[np.lexsort((-size, -width))[:WORST_GROUPS]]
    out = []
    for g in best:
        members = rows[comp[rows] == g]
        splits, counts = np.unique(rec.split_id[members], return_counts=True)
        out.append(
            {
                "records": len(members),
                "splits": {rec.splits[int(s)]: int(c) for s, c in zip(splits, counts, strict=True)},
                "labels": len(np.unique(rec.label[members][rec.has_label[members]])),
                "first": _ref(rec, int(members[0])),
            }
        )
    return out


def build_report(
    an: Analysis, path: str, fields: CheckFields, records: dict[str, int]
) -> CheckReport:
    pairs = _pairs(an)
    conflicts = {"exact": 0, "near": 0}
    for p in pairs:
        conflicts[p["kind"]] += p["labels_differ"]
    return CheckReport(
        path=path,
        fields=fields,
        radius=an.radius,
        cosine=an.cosine,
        records=records,
        training=an.records.splits[0],
        duplicates=pairs,
        leakage=_leakage(an),
        within=_within(an, pairs),
        label_conflicts=conflicts,
        groups=_groups(an),
    )
