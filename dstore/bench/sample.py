"""Which records each bench cell measures, and the working copies they are written from.

Small data is measured whole: one part holding every record. Data above
:data:`SAMPLE_ABOVE` raw bytes (or when ``sample=N`` is asked) is measured on a
seeded random sample of records, stratified by split (each split gives its share
of the sample, at least one record per part), cut into :data:`PARTS` disjoint
parts of equal size, each stratified too, plus a ``tiny`` output of one record per
split: :mod:`.extrapolate` turns their figures into the whole data's, with an
interval.

The copies are uncompressed npz files in the bench's working folder, written in
one streamed pass over the input (batch by batch: memory stays bounded by the
batch, whatever the input's size), so that every cell converts from the same
fast source and the input is read once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..model import Column, take_column
from ..model.checksums import FieldHasher
from ..model.schema import Batch, Schema, SplitSpec

if TYPE_CHECKING:
    from ..abc import Codec

__all__ = [
    "PARTS",
    "SAMPLE_ABOVE",
    "SAMPLE_BYTES",
    "SamplePlan",
    "auto_sample",
    "encoded_records",
    "part_schema",
    "plan_sample",
    "size_proxy",
    "write_parts",
]

#: Raw bytes above which ``sample="auto"`` measures a sample instead of every record.
SAMPLE_ABOVE = 512 * 2**20
#: Raw bytes ``sample="auto"`` aims its sample at (records of the average size).
SAMPLE_BYTES = 192 * 2**20
#: Fewest records an automatic sample holds (the parts' spread needs records).
SAMPLE_MIN_RECORDS = 600
#: Disjoint parts a sample is cut into (their spread gives the interval).
PARTS = 6


@dataclass
class SamplePlan:
    """The records of each part, per split (indices into the input's split, sorted)."""

    counts: dict[str, int]  # the input's records per split
    parts: list[dict[str, np.ndarray]]
    tiny: dict[str, np.ndarray] | None = None  # None: not sampled
    seed: int = 0
    files: list[str] = field(default_factory=list)  # the parts' copies, once written
    tiny_file: str | None = None
    #: a sampled plan's size proxy (:func:`size_proxy`), of every record and of each part
    proxy_total: float = 0.0
    proxy_parts: list[float] = field(default_factory=list)
    proxy_tiny: float = 0.0

    @property
    def sampled(self) -> bool:
        return self.tiny is not None

    @property
    def records(self) -> int:
        """Records measured (all parts)."""
        return sum(len(ix) for part in self.parts for ix in part.values())

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def part_records(self, i: int) -> int:
        return sum(len(ix) for ix in self.parts[i].values())

    @property
    def tiny_records(self) -> int:
        return sum(len(ix) for ix in (self.tiny or {}).values())

    def describe(self) -> str:
        """One line for the report's header ("" when every record is measured)."""
        if not self.sampled:
            return ""
        return (
            f"sample: {self.records:,} of {self.total:,} records (seed {self.seed}, stratified "
            f"by split, {len(self.parts)} parts); sizes and times extrapolated, with 95% intervals"
        )


def auto_sample(schema: Schema) -> int | None:
    """Records ``sample="auto"`` measures: None (all) for small data, else about
    :data:`SAMPLE_BYTES` worth (at least :data:`SAMPLE_MIN_RECORDS`)."""
    raw, records = schema.nbytes, schema.records
    if raw <= SAMPLE_ABOVE or not records:
        return None
    n = max(SAMPLE_MIN_RECORDS, int(SAMPLE_BYTES / (raw / records)))
    return n if n < records * 0.8 else None  # most of it anyway: measure it all


def plan_sample(counts: Mapping[str, int], sample: int | None, seed: int = 0) -> SamplePlan:
    """Every record in one part (``sample`` None or not smaller than the data), else a
    seeded sample of about ``sample`` records stratified by split in :data:`PARTS` parts."""
    counts = {s: int(c) for s, c in counts.items()}
    total = sum(counts.values())
    if sample is None or sample >= total or total < 2 * PARTS:
        return SamplePlan(counts, [{s: np.arange(c) for s, c in counts.items()}], None, seed)
    rng = np.random.default_rng(seed)
    parts: list[dict[str, np.ndarray]] = [{} for _ in range(PARTS)]
    tiny: dict[str, np.ndarray] = {}
    for split, count in counts.items():
        share = round(sample * count / total)
        share = min(count, max(share, PARTS if count >= PARTS else 0))
        share -= share % PARTS  # equal parts: the rates compare like for like
        picks = rng.permutation(count)[:share]
        for i in range(PARTS):
            parts[i][split] = np.sort(picks[i::PARTS])
        tiny[split] = np.sort(picks[:1]) if share else np.zeros(0, np.int64)
    return SamplePlan(counts, parts, tiny, seed)


#: The size proxy: this many slices of each record's bytes, this long each.
_PROXY_SLICES, _PROXY_BYTES = 8, 4096


def size_proxy(batch: Batch) -> np.ndarray:
    """Per record, a cheap measure of how well it compresses: the zlib level 1 size of
    :data:`_PROXY_SLICES` slices of its bytes (about 0.5 ms for a 256x256x3 tile). The
    bytes of a sampled cell are extrapolated by the ratio of its bytes to the proxy
    (:func:`dstore.bench.extrapolate.extrapolate_ratio`): stored sizes follow it (r
    0.87-0.99 on photo tiles for PNG, JPEG and deflate), so the sample's luck in
    drawing big or small records cancels out."""
    import zlib

    cols = [c for c in batch.values() if isinstance(c, np.ndarray)]
    n = len(next(iter(batch.values()))) if batch else 0
    out = np.zeros(n, np.float64)
    for col in cols:
        flat = np.ascontiguousarray(col).reshape(n, -1).view(np.uint8) if n else col
        width = flat.shape[1] if n else 0
        step = max(_PROXY_BYTES, width // _PROXY_SLICES)
        for i in range(n):
            row = flat[i]
            out[i] += sum(
                len(zlib.compress(row[a : a + _PROXY_BYTES].tobytes(), 1))
                for a in range(0, width, step)
            )
    return out + 1.0  # never 0: a record of no bytes still costs its framing


def encoded_records(codec: Codec, schema: Schema, picks: Mapping[str, np.ndarray]) -> int:
    """Records ``codec`` encodes to write the records ``picks`` of ``schema``: each once,
    plus those a sharded format encodes first to size its shards
    (``Codec.planning_records``: the first 64 of each split larger than half a shard).
    A sample part may be encoded once while the whole data is encoded 1.1 times, or
    the other way round: the bench extrapolates write times per record encoded."""
    part = part_schema(schema, picks)
    return part.records + codec.planning_records(part)


def part_schema(schema: Schema, picks: Mapping[str, np.ndarray]) -> Schema:
    splits = {
        s: SplitSpec(s, len(picks[s]), dict(spec.fields)) for s, spec in schema.splits.items()
    }
    return Schema(splits, dict(schema.attrs))


def _routed(
    batches: Iterator[Batch], picks: list[np.ndarray]
) -> Iterator[tuple[int, dict[str, Column]]]:
    """(part, sub-batch) of the picked records of each batch, in record order."""
    pos = 0
    for batch in batches:
        n = len(next(iter(batch.values()))) if batch else 0
        for i, ix in enumerate(picks):
            lo, hi = np.searchsorted(ix, (pos, pos + n))
            if hi > lo:
                local = ix[lo:hi] - pos
                yield i, {name: take_column(col, local) for name, col in batch.items()}
        pos += n


def write_parts(reader: object, plan: SamplePlan, workdir: str) -> None:
    """Write each part (and the tiny output) to an uncompressed npz in ``workdir``, in one
    streamed pass over ``reader`` (a :class:`~dstore.abc.Reader`)."""
    from ..registry import get_codec_class

    schema: Schema = reader.schema  # type: ignore[attr-defined]
    codec = get_codec_class("npz")(compress=False, check_space=False)
    wanted = list(plan.parts) + ([plan.tiny] if plan.tiny is not None else [])
    paths = [os.path.join(workdir, f"part-{i}.npz") for i in range(len(plan.parts))]
    if plan.tiny is not None:
        paths.append(os.path.join(workdir, "tiny.npz"))
    schemas = [part_schema(schema, picks) for picks in wanted]
    hashers = [FieldHasher(s) for s in schemas]
    writers = [codec.open_writer(p, s) for p, s in zip(paths, schemas, strict=True)]
    proxies = [0.0] * len(wanted)
    try:
        for split in schema.splits:
            picks = [w[split] for w in wanted]
            batches = reader.iter_batches(split)  # type: ignore[attr-defined]
            if plan.sampled:
                batches = _proxied(batches, plan, picks, proxies)
            for i, sub in _routed(batches, picks):
                hashers[i].update(split, sub)
                writers[i].write(split, sub)
        for w, s, h in zip(writers, schemas, hashers, strict=True):
            s.checksums = h.hexdigests()
            w.close()
    except BaseException:
        for w in writers:
            w.abort()
        raise
    plan.files = paths[: len(plan.parts)]
    plan.tiny_file = paths[-1] if plan.tiny is not None else None
    plan.proxy_parts = proxies[: len(plan.parts)]
    plan.proxy_tiny = proxies[-1] if plan.tiny is not None else 0.0


def _proxied(
    batches: Iterator[Batch], plan: SamplePlan, picks: list[np.ndarray], parts: list[float]
) -> Iterator[Batch]:
    """The batches as they come, their records' size proxies added up (all, and per part)."""
    pos = 0
    for batch in batches:
        proxy = size_proxy(batch)
        plan.proxy_total += float(proxy.sum())
        for j, ix in enumerate(picks):
            lo, hi = np.searchsorted(ix, (pos, pos + len(proxy)))
            parts[j] += float(proxy[ix[lo:hi] - pos].sum())
        pos += len(proxy)
        yield batch
