"""The benchmark loop: every format x dtype policy x codec setting on the user's data.

Each cell converts the (optionally sampled) source with the library's own
convert path, then measures: bytes on disk, write time, full read time
(median of ``repeats``), peak memory of the write (resident set growth over
the process's level before it, sampled every 5 ms), error against the
original, and the probe's accuracy on the round-tripped data (or a user's
``evaluate``).
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import tempfile
import time
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import api
from ..dtypes import parse_policy
from ..errors import DstoreError
from ..output import path_size, remove_path
from ..registry import available_codecs, default_extension
from .accuracy import Evaluate, Task, find_task, run_probe

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
    peak_write_mb: float = float("nan")
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


class PeakRSS:
    """Peak growth of this process's resident set while the block runs (sampled)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.mb = float("nan")

    @staticmethod
    def _rss() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            import psutil

            return int(psutil.Process().memory_info().rss)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            self._peak = max(self._peak, self._rss())

    def __enter__(self) -> PeakRSS:
        self._start = self._peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self._rss())
        self.mb = (self._peak - self._start) / 2**20


def _machine() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in ("numpy", "zarr", "h5py", "imagecodecs", "isal", "scikit-learn"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return {"cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions}


def _read_all(path: str, fmt: str) -> dict[str, dict[str, np.ndarray]]:
    with api.open(path, format=fmt) as ds:
        return {s: ds[s].read() for s in ds}


def _errors(orig: Mapping[str, Mapping[str, np.ndarray]], got: Mapping[str, Mapping[str, np.ndarray]]) -> tuple[float, float, bool]:
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


def _sample_source(src: str, sample: int | None, workdir: str) -> tuple[str, dict[str, dict[str, np.ndarray]]]:
    """The data every cell starts from, held in memory (the first ``sample`` records per split)."""
    with api.open(src) as ds:
        data = {}
        for split in ds:
            stop = ds[split].count if sample is None else min(sample, ds[split].count)
            data[split] = {n: ds[split][n][:stop] for n in ds[split]}
    path = os.path.join(workdir, "source.npz")
    api.save(data, path, compress=False)
    return path, data


def bench(
    src: str | os.PathLike[str],
    *,
    formats: Sequence[str] | None = None,
    dtypes: Sequence[str] = ("keep", "float32", "float16"),
    grid: bool = False,
    evaluate: Evaluate | None = None,
    features: str | None = None,
    labels: str | None = None,
    sample: int | None = None,
    repeats: int = 3,
    objective: str = "size",
    max_accuracy_drop: float = 0.1,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Measure every format x dtype policy (x codec setting) on ``src``; see the module doc."""
    from .report import recommend

    src = os.fspath(src)
    usable = [n for n, hint in available_codecs().items() if hint is None]
    formats = list(formats) if formats else usable
    workdir = tempfile.mkdtemp(prefix="dstore-bench-")
    try:
        source, original = _sample_source(src, sample, workdir)
        schema = api.info(source).schema
        task: Task | None = None
        baseline = probe_s = noise = float("nan")
        warnings: list[str] = []
        if evaluate is None:
            try:
                task = find_task(schema, features, labels)
                base = run_probe(original, task)
                baseline, probe_s, noise = base.accuracy, base.seconds, 2 * base.stderr_points
            except DstoreError as e:
                warnings.append(f"no accuracy probe: {e}")
        else:
            t = time.perf_counter()
            baseline = float(evaluate(original))
            probe_s = time.perf_counter() - t
        cells: list[Cell] = []
        for fmt in formats:
            ext = default_extension(fmt)
            for options in default_settings(fmt, grid):
                for dtype in dtypes:
                    cell = Cell(fmt, dtype, dict(options), raw_bytes=schema.nbytes, records=schema.records)
                    if progress is not None:
                        progress(f"{cell.label} {dtype}")
                    out = os.path.join(workdir, f"cell-{len(cells)}{ext}")
                    _measure(cell, source, out, original, task, evaluate, baseline, noise, repeats)
                    if cell.error:  # name the user's file, not the bench's working copy
                        cell.error = cell.error.replace(source, src)
                    cells.append(cell)
        report = BenchReport(src, task, baseline, probe_s, noise, cells, _machine(),
                             {"formats": formats, "dtypes": list(dtypes), "grid": grid, "sample": sample,
                              "repeats": repeats, "objective": objective,
                              "max_accuracy_drop": max_accuracy_drop}, warnings=warnings)
        report.recommendation, report.reason = recommend(report, objective, max_accuracy_drop)
        return report
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(cell: Cell, source: str, out: str, original: dict, task: Task | None,
             evaluate: Evaluate | None, baseline: float, noise: float, repeats: int) -> None:
    try:
        policy = parse_policy(cell.dtype)
        with PeakRSS() as peak:
            t = time.perf_counter()
            try:
                api.convert(source, out, to=cell.format, dtype=policy, options=cell.options)
            finally:
                cell.write_s = time.perf_counter() - t
        cell.peak_write_mb = peak.mb
        cell.bytes = path_size(out)
        times = []
        got: dict = {}
        for _ in range(max(1, repeats)):
            t = time.perf_counter()
            got = _read_all(out, cell.format)
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
