"""The benchmark loop: every format x dtype policy x codec setting on the user's data.

Inputs are checked before any work (formats, dtype policies, the probe's fields
and scikit-learn, the user's evaluation function). Each cell then converts the
(optionally sampled) source with the library's own convert path in a fresh
child process (:mod:`.write_child`): one untimed warm-up write, then ``repeats``
timed ones, so the write time is a median that no import or first-touch cost
inflates, and the peak memory is that process's peak resident set. Back in
this process: bytes on disk, full read time (one untimed read, then the median
of ``repeats``), error against the original, and the probe's accuracy on the
round-tripped data (or a user's ``evaluate``).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import api
from ..dtypes import parse_policy
from ..errors import DstoreError, UsageError
from ..output import path_size, remove_path
from ..registry import available_codecs, default_extension, get_codec_class, registry
from .accuracy import Evaluate, Task, find_task, load_evaluate, require_sklearn, run_probe

__all__ = ["Cell", "bench", "default_settings"]


def default_settings(fmt: str, grid: bool) -> list[dict[str, Any]]:
    """Codec options per cell: the defaults first; ``grid`` adds compressor/level variants."""
    base: list[dict[str, Any]] = [{}]
    if not grid:
        return base
    extra = {
        "npz": [{"level": 1}, {"level": 9}, {"compress": False}],
        "zarr": [{"cname": "lz4"}, {"cname": "zstd", "clevel": 7}, {"shuffle": "bitshuffle"}],
        "hdf5": [{"compression": "lzf"}, {"level": 9, "shuffle": True}, {"compression": "none"}],
        "tfrecord": [{"png_level": "6"}, {"compression": "gzip"}],
    }
    return base + extra.get(fmt, [])


@dataclass
class Cell:
    """One measured configuration."""

    format: str
    dtype: str
    options: dict[str, Any]
    bytes: int = 0
    raw_bytes: int = 0
    records: int = 0
    write_s: float = float("nan")
    read_s: float = float("nan")
    peak_write_mb: float = float("nan")  # peak RSS of the process that wrote (MiB)
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    bit_exact: bool = False
    accuracy: float = float("nan")
    accuracy_delta: float = float("nan")  # points against the original data
    probe_s: float = float("nan")
    within_noise: bool | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.format}[{opts}]" if opts else self.format

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.bytes if self.bytes else float("nan")

    @property
    def bytes_per_record(self) -> float:
        return self.bytes / self.records if self.records else float("nan")


@dataclass
class BenchReport:
    source: str
    task: Task | None
    baseline_accuracy: float
    baseline_probe_s: float
    noise_points: float
    cells: list[Cell]
    machine: dict[str, Any]
    settings: dict[str, Any]
    recommendation: Cell | None = None
    reason: str = ""
    warnings: list[str] = field(default_factory=list)


def _machine() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in ("numpy", "zarr", "h5py", "imagecodecs", "isal", "scikit-learn"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def _read_all(path: str, fmt: str) -> dict[str, dict[str, np.ndarray]]:
    with api.open(path, format=fmt) as ds:
        return {s: ds[s].read() for s in ds}


def _errors(
    orig: Mapping[str, Mapping[str, np.ndarray]], got: Mapping[str, Mapping[str, np.ndarray]]
) -> tuple[float, float, bool]:
    max_abs = max_rel = 0.0
    exact = True
    for split, fields in orig.items():
        for name, a in fields.items():
            b = got[split][name]
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                exact = False
            if a.dtype.kind in "fc" or b.dtype.kind in "fc":
                a64 = a.astype(np.complex128 if "c" in a.dtype.kind + b.dtype.kind else np.float64)
                b64 = b.astype(a64.dtype)
                ok = np.isfinite(a64) & np.isfinite(b64)
                if ok.any():
                    err = np.abs(a64[ok] - b64[ok])
                    max_abs = max(max_abs, float(err.max()))
                    denom = np.abs(a64[ok])
                    nz = denom > 0
                    if nz.any():
                        max_rel = max(max_rel, float((err[nz] / denom[nz]).max()))
    return max_abs, max_rel, exact


def _sample_source(
    src: str, sample: int | None, workdir: str
) -> tuple[str, dict[str, dict[str, np.ndarray]]]:
    """The data every cell starts from, held in memory (the first ``sample`` records per split)."""
    with api.open(src) as ds:
        data = {}
        for split in ds:
            stop = ds[split].count if sample is None else min(sample, ds[split].count)
            data[split] = {n: ds[split][n][:stop] for n in ds[split]}
    path = os.path.join(workdir, "source.npz")
    api.save(data, path, compress=False)
    return path, data


def _check_inputs(
    formats: Sequence[str] | None,
    dtypes: Sequence[str],
    repeats: int,
    sample: int | None,
    objective: str,
) -> list[str]:
    """Everything that can be wrong before any work: one DstoreError naming what and why."""
    from .report import OBJECTIVES

    if formats:
        for fmt in formats:
            get_codec_class(fmt)  # unknown name or missing extra: one line naming it
        chosen = list(formats)
    else:
        chosen = [n for n, hint in available_codecs().items() if hint is None]
    if not dtypes:
        raise UsageError("dtypes: give at least one dtype policy (keep, float32, float16, ...)")
    for dtype in dtypes:
        parse_policy(dtype)  # DtypePolicyError listing the valid policies
    if repeats < 1:
        raise UsageError(f"repeats must be >= 1. Got {repeats}.")
    if sample is not None and sample < 1:
        raise UsageError(f"sample must be >= 1 record. Got {sample}.")
    if objective not in OBJECTIVES:
        raise UsageError(f"objective must be one of {', '.join(OBJECTIVES)}. Got {objective!r}.")
    return chosen


def bench(
    src: str | os.PathLike[str],
    *,
    formats: Sequence[str] | None = None,
    dtypes: Sequence[str] = ("keep", "float32", "float16"),
    grid: bool = False,
    evaluate: Evaluate | str | None = None,
    features: str | None = None,
    labels: str | None = None,
    sample: int | None = None,
    repeats: int = 3,
    objective: str = "size",
    max_accuracy_drop: float = 0.1,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Measure every format x dtype policy (x codec setting) on ``src``; see the module doc.

    ``evaluate`` is a function ``data -> score`` or a ``"module:function"`` name
    (imported from the working directory first); without it the accuracy probe
    runs when the features and labels are named or recognisable.
    """
    from .report import recommend

    src = os.fspath(src)
    dtypes = list(dtypes)
    formats = _check_inputs(formats, dtypes, repeats, sample, objective)
    if isinstance(evaluate, str):
        evaluate = load_evaluate(evaluate)
    schema = api.info(src).schema
    task: Task | None = None
    warnings: list[str] = []
    if evaluate is None:
        try:
            task = find_task(schema, features, labels)
        except DstoreError as e:
            if features is not None or labels is not None:
                raise type(e)(f"{src}: {e}") from None
            warnings.append(f"no accuracy probe: {e}")
        if task is not None:
            require_sklearn()
    workdir = tempfile.mkdtemp(prefix="dstore-bench-")
    try:
        source, original = _sample_source(src, sample, workdir)
        schema = api.info(source).schema
        baseline = probe_s = noise = float("nan")
        if task is not None:
            base = run_probe(original, task)
            baseline, probe_s, noise = base.accuracy, base.seconds, 2 * base.stderr_points
        elif evaluate is not None:
            t = time.perf_counter()
            baseline = float(evaluate(original))
            probe_s = time.perf_counter() - t
        cells: list[Cell] = []
        for fmt in formats:
            ext = default_extension(fmt)
            for options in default_settings(fmt, grid):
                for dtype in dtypes:
                    cell = Cell(
                        fmt, dtype, dict(options), raw_bytes=schema.nbytes, records=schema.records
                    )
                    if progress is not None:
                        progress(f"{cell.label} {dtype}")
                    out = os.path.join(workdir, f"cell-{len(cells)}{ext}")
                    _measure(cell, source, out, original, task, evaluate, baseline, noise, repeats)
                    if cell.error:  # name the user's file, not the bench's working copy
                        cell.error = cell.error.replace(source, src)
                    cells.append(cell)
        report = BenchReport(
            src,
            task,
            baseline,
            probe_s,
            noise,
            cells,
            _machine(),
            {
                "formats": formats,
                "dtypes": dtypes,
                "grid": grid,
                "sample": sample,
                "repeats": repeats,
                "objective": objective,
                "max_accuracy_drop": max_accuracy_drop,
            },
            warnings=warnings,
        )
        report.recommendation, report.reason = recommend(report, objective, max_accuracy_drop)
        return report
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _child_env() -> dict[str, str]:
    """The child imports this very dstore, whatever the parent's ``sys.path`` tricks."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _write_in_child(cell: Cell, source: str, out: str, repeats: int) -> None:
    """Warm-up plus ``repeats`` timed writes in a fresh process: median time, peak RSS."""
    request_path = out + ".request.json"
    result_path = out + ".result.json"
    builtin = cell.format in ("npz", "zarr", "hdf5", "tfrecord")
    request = {
        "source": source,
        "out": out,
        "format": cell.format,
        "dtype": cell.dtype,
        "options": cell.options,
        "repeats": repeats,
        "result": result_path,
        "codec_target": None if builtin else registry[cell.format].target,
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
            return
        with open(result_path) as f:
            result = json.load(f)
    finally:
        for path in (request_path, result_path):
            if os.path.exists(path):
                os.remove(path)
    cell.peak_write_mb = result["peak_rss"] / 2**20
    if "error" in result:
        cell.error = result["error"]
    else:
        cell.write_s = statistics.median(result["write_s"])


def _measure(
    cell: Cell,
    source: str,
    out: str,
    original: dict,
    task: Task | None,
    evaluate: Evaluate | None,
    baseline: float,
    noise: float,
    repeats: int,
) -> None:
    try:
        _write_in_child(cell, source, out, repeats)
        if cell.error:
            return
        cell.bytes = path_size(out)
        got = _read_all(out, cell.format)  # untimed: the first read pays imports and caches
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            _read_all(out, cell.format)
            times.append(time.perf_counter() - t)
        cell.read_s = statistics.median(times)
        cell.max_abs_error, cell.max_rel_error, cell.bit_exact = _errors(original, got)
        if evaluate is not None:
            t = time.perf_counter()
            cell.accuracy = float(evaluate(got))
            cell.probe_s = time.perf_counter() - t
        elif task is not None:
            res = run_probe(got, task)
            cell.accuracy, cell.probe_s = res.accuracy, res.seconds
        if not np.isnan(cell.accuracy):
            cell.accuracy_delta = 100 * (cell.accuracy - baseline)
            cell.within_noise = abs(cell.accuracy_delta) <= noise if not np.isnan(noise) else None
            if cell.bit_exact and cell.accuracy != baseline:
                cell.error = "honesty check failed: lossless data gave a different accuracy"
    except DstoreError as e:
        cell.error = f"{type(e).__name__}: {e}"
    finally:
        remove_path(out)
