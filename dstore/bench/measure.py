"""Measuring one cell: write in a child process, then size, read, error, probe, loader.

The writes run in a fresh child (:mod:`.write_child`): one untimed warm-up, then the
timed writes -- ``repeats`` of the whole data, or, for a sample, the tiny output
three times and each part once. Back here: bytes on disk, one streamed pass
that compares the read-back with the original and hashes the probe's records
(:mod:`.scan`), then the timed reads (the same split, the same count: medians of
``repeats`` whole reads, or the tiny output three times and each part once), and
with ``--read`` the training loader in storage order and shuffled. A sample's
figures become the whole data's with :func:`.extrapolate.extrapolate`.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import api
from ..bounded_json import load_json_file
from ..errors import DstoreError
from ..model.schema import Schema
from ..output import path_size, remove_path
from ..registry import default_extension, get_codec, registry
from .extrapolate import Estimate, extrapolate, extrapolate_ratio
from .loader import LoaderRead, drop_from_page_cache, loader_pass
from .results import Cell
from .sample import SamplePlan, encoded_records
from .scan import ScanResult, scan
from .shuffle import delivered_order, permutation_quality, shuffle_quality

if TYPE_CHECKING:
    from ..abc import Codec

__all__ = ["Workspace", "input_loader", "measure_cell", "read_seconds"]

#: Errors that mean "this format cannot store that", not "something broke".
_UNSUPPORTED_ERRORS = (
    "MissingDependencyError",
    "UnsupportedDtypeError",
    "CodecLibraryMissing",  # an image codec library imagecodecs was built without
)
#: Timed runs of the tiny output (its figures are small and noisy: a median).
_TINY_RUNS = 3


@dataclass
class Workspace:
    """What every cell of one run shares: the sample and its copies, the probe's records,
    the loader settings, and the scores already known (by the probe records' hash)."""

    plan: SamplePlan
    workdir: str
    roles: list[dict[str, np.ndarray]]  # per part, per split: 0, or the probe role
    probe_fields: list[str]
    repeats: int
    how: LoaderRead | None = None
    keys_part: int | None = None  # the part whose order the loader check recovers
    keys_split: str | None = None
    score: Callable[[Cell, list[str], str], None] | None = None  # fills a cell's accuracy
    splits: list[str] = field(default_factory=list)
    src: str = ""  # the user's input, named in errors instead of the working copies
    schema: Schema | None = None  # the input's (a sharded write's planning depends on it)


def read_seconds(path: str, fmt: str) -> tuple[float, float]:
    """Wall and CPU seconds of reading every record of every split, batch by batch."""
    t, cpu = time.perf_counter(), time.process_time()
    with api.open(path, format=fmt) as ds:
        for split in ds:
            for _ in ds[split].iter_batches():
                pass
    return time.perf_counter() - t, time.process_time() - cpu


def _child_env() -> dict[str, str]:
    """The child imports this very dstore, whatever the parent's ``sys.path`` tricks."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _write_in_child(
    cell: Cell, writes: list[dict[str, Any]], request_path: str, whole: int
) -> list[Any]:
    """Run ``writes`` in a fresh process: their [wall, cpu] timings (and peak RSS in cell)."""
    result_path = request_path + ".result.json"
    request = {
        "writes": writes,
        "format": cell.format,
        "dtype": cell.dtype,
        "options": cell.write_options,
        "result": result_path,
        "whole_records": whole,
        # the child registers a codec the parent registered by hand (built-ins it has)
        "codec_target": registry[cell.format].target,
    }
    with open(request_path, "w") as f:
        json.dump(request, f)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "dstore.bench.write_child", request_path],
            env=_child_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not os.path.exists(result_path):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            cell.error = f"the write process failed (exit {proc.returncode}): {last}"
            return []
        result = load_json_file(result_path, "bench result")
    finally:
        for path in (request_path, result_path):
            if os.path.exists(path):
                os.remove(path)
    cell.peak_write_mb = result["peak_rss"] / 2**20
    if "error" in result:
        cell.error = result["error"]
        return []
    return list(result["writes"])


def _outputs(ws: Workspace, cell: Cell, index: int) -> tuple[list[str], str | None]:
    ext = default_extension(cell.format)
    outs = [os.path.join(ws.workdir, f"cell-{index}-{j}{ext}") for j in range(len(ws.plan.files))]
    tiny = os.path.join(ws.workdir, f"cell-{index}-tiny{ext}") if ws.plan.sampled else None
    return outs, tiny


def _write_plan(ws: Workspace, outs: list[str], tiny: str | None) -> list[dict[str, Any]]:
    plan = ws.plan
    if tiny is None:  # the whole data: warm-up, then the repeats
        src, out = plan.files[0], outs[0]
        return [
            {"source": src, "out": out, "repeats": 0},
            {"source": src, "out": out, "repeats": ws.repeats},
        ]
    assert plan.tiny_file is not None
    writes = [{"source": plan.tiny_file, "out": tiny, "repeats": 0}]
    writes.append({"source": plan.tiny_file, "out": tiny, "repeats": _TINY_RUNS})
    writes += [{"source": s, "out": o, "repeats": 1} for s, o in zip(plan.files, outs, strict=True)]
    return writes


def _median(runs: Sequence[Sequence[float]], i: int) -> float:
    return statistics.median(r[i] for r in runs)


def _figure(
    ws: Workspace, tiny_x: float | None, part_x: Sequence[float], codec: Codec | None = None
) -> Estimate:
    """The whole data's figure from a sample's measurements (or the whole's as it is);
    ``tiny_x`` None: no fixed cost (sizes). ``codec``: a write's, whose cost goes by the
    records it encodes (:func:`.sample.encoded_records`), not the records it stores."""
    plan = ws.plan
    if not plan.sampled:
        return Estimate(part_x[0])

    def work(picks: Mapping[str, np.ndarray]) -> int:
        if codec is None or ws.schema is None:
            return sum(len(ix) for ix in picks.values())
        return encoded_records(codec, ws.schema, picks)

    parts = [(work(picks), x) for picks, x in zip(plan.parts, part_x, strict=True)]
    tiny = None if tiny_x is None or plan.tiny is None else (work(plan.tiny), tiny_x)
    whole = work({s: np.arange(c) for s, c in plan.counts.items()})
    return extrapolate(whole, tiny, parts)


def _writing_codec(cell: Cell) -> Codec | None:
    """The codec the cell's writes used (None: its options are not a codec's own)."""
    try:
        return get_codec(cell.format, **cell.write_options)
    except (DstoreError, TypeError, ValueError):
        return None


def _set(cell: Cell, name: str, est: Estimate) -> None:
    setattr(cell, name, round(est.value) if name == "bytes" else est.value)
    if est.extrapolated:
        cell.intervals[name] = [est.lo, est.hi]


def _whole(cell: Cell, name: str, runs: Sequence[float]) -> None:
    """A figure of the whole data: the median of its repeats, and their range."""
    _set(cell, name, Estimate(statistics.median(runs)))
    cell.repeat_range[name] = [min(runs), max(runs)]


def _reads(ws: Workspace, cell: Cell, outs: list[str], tiny: str | None) -> None:
    if tiny is None:
        runs = [read_seconds(outs[0], cell.format) for _ in range(ws.repeats)]
        _whole(cell, "read_s", [r[0] for r in runs])
        _whole(cell, "read_cpu_s", [r[1] for r in runs])
        return
    tiny_runs = [read_seconds(tiny, cell.format) for _ in range(_TINY_RUNS)]
    parts = [read_seconds(o, cell.format) for o in outs]
    _set(cell, "read_s", _figure(ws, _median(tiny_runs, 0), [p[0] for p in parts]))
    _set(cell, "read_cpu_s", _figure(ws, _median(tiny_runs, 1), [p[1] for p in parts]))


def measure_cell(ws: Workspace, cell: Cell, index: int) -> None:
    """Fill ``cell`` with its measures (or its error); its outputs are removed after."""
    started = time.perf_counter()
    outs, tiny = _outputs(ws, cell, index)
    try:
        _measure(ws, cell, outs, tiny, index)
    except DstoreError as e:
        cell.error = f"{type(e).__name__}: {e}"
    finally:
        for path in [*outs, *([tiny] if tiny else [])]:
            remove_path(path)
        cell.seconds = time.perf_counter() - started
    for copy in [*ws.plan.files, ws.plan.tiny_file]:
        if copy and ws.src:  # name the user's file, not the bench's working copy
            cell.error = cell.error.replace(copy, ws.src) if cell.error else cell.error
            cell.unsupported = cell.unsupported.replace(copy, ws.src) if cell.unsupported else None


def _measure(ws: Workspace, cell: Cell, outs: list[str], tiny: str | None, index: int) -> None:
    request = os.path.join(ws.workdir, f"cell-{index}.json")
    writes = _write_in_child(cell, _write_plan(ws, outs, tiny), request, ws.plan.total)
    if cell.error:
        if cell.error.split(":", 1)[0] in _UNSUPPORTED_ERRORS:
            cell.unsupported, cell.error = cell.error.split(": ", 1)[-1], None
        return
    timed = writes[1]
    if tiny is None:
        _whole(cell, "write_s", [r[0] for r in timed])
        _whole(cell, "write_cpu_s", [r[1] for r in timed])
        _set(cell, "bytes", Estimate(path_size(outs[0])))
    else:
        parts = [w[0] for w in writes[2:]]
        codec = _writing_codec(cell)
        _set(cell, "write_s", _figure(ws, _median(timed, 0), [p[0] for p in parts], codec))
        _set(cell, "write_cpu_s", _figure(ws, _median(timed, 1), [p[1] for p in parts], codec))
        sizes = [path_size(o) for o in outs]
        plan = ws.plan
        pairs = list(zip(sizes, plan.proxy_parts, strict=True))
        tiny_pair = (path_size(tiny), plan.proxy_tiny)
        by_ratio = extrapolate_ratio(plan.records, plan.total, pairs, plan.proxy_total, tiny_pair)
        _set(cell, "bytes", by_ratio)
        cell.sampled = ws.plan.records
    found = scan(
        outs,
        cell.format,
        ws.roles,
        ws.probe_fields,
        original_files=ws.plan.files,
        keys_part=ws.keys_part,
    )
    comp = found.comparison
    cell.max_abs_error, cell.max_rel_error = comp.max_abs, comp.max_rel
    cell.exact, cell.bit_exact, cell.differs = comp.exact, comp.bit_exact, comp.differs
    _reads(ws, cell, outs, tiny)
    if ws.how is not None:
        _loader(ws, cell, outs, tiny, found)
    if ws.score is not None:
        ws.score(cell, outs, found.probe_hash)


def _loader_seconds(
    ws: Workspace, cell: Cell, outs: list[str], tiny: str | None, shuffle: bool
) -> tuple[Estimate, Any]:
    """The whole data's seconds of one loader pass, and the pass whose order is checked."""
    how = ws.how
    assert how is not None

    def one(path: str, keys: bool = False) -> Any:
        split = ws.keys_split if keys else None
        return loader_pass(path, cell.format, ws.splits, how, shuffle=shuffle, keys_split=split)

    if tiny is None:
        runs = [one(outs[0], keys=True) for _ in range(ws.repeats)]
        return Estimate(statistics.median(p.seconds for p in runs)), runs[0]
    t_runs = [one(tiny) for _ in range(_TINY_RUNS)]
    parts = [one(o, keys=(j == ws.keys_part)) for j, o in enumerate(outs)]
    tiny_s = statistics.median(p.seconds for p in t_runs)
    return _figure(ws, tiny_s, [p.seconds for p in parts]), parts[ws.keys_part or 0]


def _loader(
    ws: Workspace, cell: Cell, outs: list[str], tiny: str | None, found: ScanResult
) -> None:
    """Records/s of the training loader, in storage order and shuffled, and how shuffled."""
    assert ws.how is not None
    if tiny is None and drop_from_page_cache(outs[0]):
        cold = loader_pass(outs[0], cell.format, ws.splits, ws.how)
        cell.loader_cold_rps = cold.records / cold.seconds
    total = ws.plan.total
    ordered, first = _loader_seconds(ws, cell, outs, tiny, shuffle=False)
    cell.loader_rps = total / ordered.value
    cell.loader_mbps = cell.bytes / ordered.value / 1e6
    cell.ordered_quality = _quality(ws.keys_split, first.keys, found)
    try:
        shuffled, first = _loader_seconds(ws, cell, outs, tiny, shuffle=True)
    except (DstoreError, ValueError) as e:  # a streaming-only file (a deflated npz)
        cell.shuffle_note = str(e).splitlines()[0]
        return
    cell.shuffled_rps = total / shuffled.value
    cell.shuffle_quality = _quality(ws.keys_split, first.keys, found)
    if ws.keys_split in found.keys:
        cell.permutation_quality = permutation_quality(len(found.keys[ws.keys_split]))


def input_loader(
    src: str, fmt: str, splits: list[str], how: LoaderRead, repeats: int, cell: Cell
) -> None:
    """The input's loader speeds (storage order and shuffled), measured whole."""
    if drop_from_page_cache(src):
        cold = loader_pass(src, fmt, splits, how)
        cell.loader_cold_rps = cold.records / cold.seconds
    runs = [loader_pass(src, fmt, splits, how) for _ in range(repeats)]
    seconds = statistics.median(p.seconds for p in runs)
    cell.loader_rps, cell.loader_mbps = runs[0].records / seconds, cell.bytes / seconds / 1e6
    try:
        runs = [loader_pass(src, fmt, splits, how, shuffle=True) for _ in range(repeats)]
    except (DstoreError, ValueError) as e:
        cell.shuffle_note = str(e).splitlines()[0]
        return
    cell.shuffled_rps = runs[0].records / statistics.median(p.seconds for p in runs)


def _quality(split: str | None, delivered: list[bytes], found: ScanResult) -> float:
    """MosaicML's shuffle quality of the delivered order (NaN: not told)."""
    if split is None or split not in found.keys:
        return math.nan
    order = delivered_order(delivered, found.keys[split])
    return math.nan if order is None else shuffle_quality(order)
