"""What ``dstore verify DATASET`` checks of a dataset's versions beyond the one it reads.

- Checksums by version: a store appended in place (zarr) cannot have one sha256 of
  each field's values without reading them all again at each append, so each version
  records the sha256 of the records it added (``checksums`` of its entry in the
  schema's ``versions``); :class:`ChecksumCheck` hashes the records it decodes in those
  segments and compares each. A dataset with whole-split checksums (never appended, or
  written whole again by its appends) is checked against those, as before.
- Every other version a sharded folder still keeps: its manifest loads, its counts are
  what its record says, and every shard it lists (those not checked already) is
  present, of its size, with its sha256.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import DstoreError
from ..model.checksums import FieldHasher
from ..model.schema import Batch, Schema, slice_batch
from ..sources.opening import open_reader

__all__ = ["ChecksumCheck", "other_versions"]


def _segments(schema: Schema, split: str) -> list[tuple[int, int, Mapping[str, str], str]]:
    """``(start, stop, checksums, what)`` of each part of ``split`` that has checksums."""
    count = schema.splits[split].count
    if schema.checksums or not schema.versions:
        return [(0, count, schema.checksums.get(split, {}), "")] if schema.checksums else []
    out = []
    start = 0
    for record in schema.versions:
        stop = min(count, int((record.get("records") or {}).get(split, start)))
        sums = (record.get("checksums") or {}).get(split)
        if sums is not None and stop > start:
            out.append(
                (
                    start,
                    stop,
                    sums,
                    f" (records {start}..{stop - 1}, version {record.get('version')})",
                )
            )
        start = max(start, stop)
    return out


class ChecksumCheck:
    """Hashes the records of each split as they are decoded, in the segments that have
    stored checksums, and says which fields match."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.parts = {s: _segments(schema, s) for s in schema.splits}
        self.whole = bool(schema.checksums)
        #: True when any part of the dataset has stored checksums
        self.any = any(self.parts.values())
        self._hashers = {
            (s, i): FieldHasher(Schema({s: schema.splits[s]}))
            for s, parts in self.parts.items()
            for i in range(len(parts))
        }
        self._pos = dict.fromkeys(schema.splits, 0)

    def update(self, split: str, batch: Batch) -> None:
        n = len(next(iter(batch.values()))) if batch else 0
        pos = self._pos[split]
        for i, (start, stop, _, _) in enumerate(self.parts[split]):
            lo, hi = max(start, pos), min(stop, pos + n)
            if lo < hi:
                part = (
                    batch if (lo, hi) == (pos, pos + n) else slice_batch(batch, lo - pos, hi - pos)
                )
                self._hashers[(split, i)].update(split, part)
        self._pos[split] = pos + n

    def results(self, split: str) -> list[tuple[str, bool, str]]:
        """``(field, ok, what)`` per field and segment of ``split``."""
        out = []
        fields = self.schema.splits[split].fields
        for i, (_, _, sums, what) in enumerate(self.parts[split]):
            got = self._hashers[(split, i)].hexdigests()[split]
            for name in fields:
                want = sums.get(name)
                if want is None:
                    if self.whole:
                        out.append((name, False, "no stored sha256 for this field"))
                    continue
                same = want == got[name]
                said = "matches" if same else "differs from the stored one"
                out.append((name, same, f"sha256 of the values {said}{what}"))
        return out


def other_versions(
    path: str, format: str | None, reader: Any, follow_links: bool
) -> list[tuple[str, bool, str]]:
    """``(what, ok, detail)`` for every kept version of a sharded folder other than the
    one ``reader`` reads: counts as recorded, shards present with their sha256."""
    if not hasattr(reader, "select_version") or getattr(reader, "manifest", None) is None:
        return []
    from ..sharding.versions import committed, pruned_through

    checked = set(getattr(reader, "located", {}).values())
    out = []
    for number in committed(path):
        if number == reader.version or number <= pruned_through(path):
            continue
        what = f"version {number}"
        try:
            with open_reader(
                path, format=format, decode=False, version=number, follow_links=follow_links
            ) as old:
                record = (
                    old.schema.versions[number - 1] if len(old.schema.versions) >= number else {}
                )
                counts = {s.name: s.count for s in old.schema.splits.values()}
                if record and record.get("records") != counts:
                    out.append(
                        (what, False, f"holds {counts}, its record says {record.get('records')}")
                    )
                    continue
                for ok, detail in old.check_integrity():
                    name = detail.split(":", 1)[0]
                    if getattr(old, "located", {}).get(name) in checked:
                        continue
                    out.append((what, ok, detail))
                out.append(
                    (
                        what,
                        True,
                        f"manifest loads; {sum(counts.values())} records in {len(counts)} split(s)",
                    )
                )
        except DstoreError as e:
            out.append((what, False, str(e)))
    return out
