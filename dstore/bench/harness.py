"""The benchmark loop: every format x image encoding x dtype policy x codec setting.

Inputs are checked before any work (formats, dtype policies, the probe's fields
and scikit-learn, the user's evaluation function). Each cell then converts the
(optionally sampled) source with the library's own convert path in a fresh
child process (:mod:`.write_child`): one untimed warm-up write, then ``repeats``
timed ones, so the write time is a median that no import or first-touch cost
inflates, and the peak memory is that process's peak resident set. Back in
this process: bytes on disk, full read time (one untimed read, then the median
of ``repeats``), error against the original, and the probe's accuracy on the
round-tripped data (or a user's ``evaluate``), with its noise band.

The user's input as it is comes first, as a baseline row: its bytes on disk and
its read time, beside which every cell is judged. A cell whose image encoding
or dtype policy this installation (or the format) cannot write is reported as
"not supported: <why>" and measured no further (see :mod:`.grid`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import api
from ..bounded_json import load_json_file
from ..errors import DstoreError, LabelError, MissingDependencyError, UsageError
from ..model import Column
from ..output import path_size, remove_path
from ..registry import available_codecs, default_extension, get_codec_class, registry
from .accuracy import (
    Evaluate,
    Score,
    Task,
    band_points,
    check_labels,
    find_task,
    is_image_batch,
    layout_kind,
    load_evaluate,
    require_sklearn,
    run_probe,
    to_score,
)
from .grid import ImageEncoding, dtype_support, image_options, parse_dtypes, parse_images
from .loader import LOADERS, LoaderRead, measure_loader
from .results import BenchReport, Cell

__all__ = ["Cell", "bench", "default_settings"]


def default_settings(fmt: str, grid: bool) -> list[dict[str, Any]]:
    """Codec options per cell: the defaults first; ``grid`` adds compressor/level variants."""
    base: list[dict[str, Any]] = [{}]
    if not grid:
        return base
    extra: dict[str, list[dict[str, Any]]] = {
        "npz": [{"level": 1}, {"level": 9}, {"compress": False}],
        "zarr": [{"cname": "lz4"}, {"cname": "zstd", "clevel": 7}, {"shuffle": "bitshuffle"}],
        "hdf5": [{"compression": "lzf"}, {"level": 9, "shuffle": True}, {"compression": "none"}],
        "tfrecord": [{"png_level": "6"}, {"compression": "gzip"}],
    }
    return base + extra.get(fmt, [])


def _machine() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for pkg in ("numpy", "zarr", "h5py", "imagecodecs", "isal", "scikit-learn"):
        with contextlib.suppress(md.PackageNotFoundError):
            versions[pkg] = md.version(pkg)
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def _read_all(path: str, fmt: str, stop: int | None = None) -> dict[str, dict[str, Column]]:
    """Every field of every split (the first ``stop`` records of each, if given)."""
    with api.open(path, format=fmt) as ds:
        if stop is None:
            return {s: ds[s].read() for s in ds}
        return {s: {n: ds[s][n][: min(stop, ds[s].count)] for n in ds[s]} for s in ds}


def _errors(
    orig: Mapping[str, Mapping[str, Column]], got: Mapping[str, Mapping[str, Column]]
) -> tuple[float, float, bool]:
    """Max absolute and relative error over numeric fields (floats and pixels), and bit-exactness.

    Integer fields count too, so a JPEG'd image shows its pixel error; the
    comparison runs a few MiB of records at a time, so 7,000 tiles never become
    one float64 copy.
    """
    max_abs = max_rel = 0.0
    exact = True
    for split, fields in orig.items():
        for name, a in fields.items():
            b = got[split][name]
            if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
                exact = exact and _same_column(a, b)  # strings, ragged: equal or not
                continue
            if a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes():
                continue  # identical: no error
            exact = False
            kinds = a.dtype.kind + b.dtype.kind
            # "V": ml_dtypes' bfloat16 (numpy has no kind for it), cast like a float below
            numeric = all(
                k in "biufc" or (k == "V" and not dt.names)
                for k, dt in zip(kinds, (a.dtype, b.dtype), strict=True)
            )
            if a.shape != b.shape or not numeric or not len(a):
                continue
            wide = np.complex128 if "c" in kinds else np.float64
            step = max(1, (8 << 20) // max(1, a[0].size * 16))
            for i in range(0, len(a), step):
                try:
                    a64, b64 = a[i : i + step].astype(wide), b[i : i + step].astype(wide)
                except (TypeError, ValueError):  # opaque bytes ("V16"): not a number
                    break
                ok = np.isfinite(a64) & np.isfinite(b64)
                if not ok.any():
                    continue
                err = np.abs(a64[ok] - b64[ok])
                max_abs = max(max_abs, float(err.max()))
                denom = np.abs(a64[ok])
                nz = denom > 0
                if nz.any():
                    max_rel = max(max_rel, float((err[nz] / denom[nz]).max()))
    return max_abs, max_rel, exact


def _same_column(a: object, b: object) -> bool:
    """Equality of two non-dense columns (VarColumn of strings or ragged values, lists)."""
    if type(a) is not type(b):
        return False
    if dataclasses.is_dataclass(a):
        return all(
            _same_column(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):  # b: the same type as a
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    try:
        return bool(a == b)
    except ValueError:  # lists of arrays: no single truth value
        return False


def _sample_source(
    src: str, sample: int | None, workdir: str
) -> tuple[str, dict[str, dict[str, Column]]]:
    """The data every cell starts from, held in memory (the first ``sample`` records per split)."""
    with api.open(src) as ds:
        data = {}
        for split in ds:
            stop = ds[split].count if sample is None else min(sample, ds[split].count)
            data[split] = {n: ds[split][n][:stop] for n in ds[split]}
    path = os.path.join(workdir, "source.npz")
    api.save(data, path, compress=False)
    # Held as every cell's data will be read back (strings and ragged fields as columns,
    # not the lists a slice gives), so that equal data compares equal.
    return path, _read_all(path, "npz")


def _check_inputs(
    formats: Sequence[str] | None,
    repeats: int,
    sample: int | None,
    objective: str,
    no_probe: dict[str, object] | None = None,
) -> list[str]:
    """Everything that can be wrong before any work: one DstoreError naming what and why.

    ``no_probe``: with ``probe=False``, the probe's other arguments, none of which may be set.
    """
    from .report import OBJECTIVES

    for name, value in (no_probe or {}).items():
        if value is not None:
            raise UsageError(
                f"--no-probe measures no accuracy, so --{name} has nothing to do; drop one"
            )

    if formats:
        for fmt in formats:
            get_codec_class(fmt)  # unknown name or missing extra: one line naming it
        chosen = list(formats)
    else:
        chosen = [n for n, hint in available_codecs().items() if hint is None]
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
    images: Sequence[str] = ("png",),
    grid: bool = False,
    evaluate: Evaluate | str | None = None,
    features: str | None = None,
    labels: str | None = None,
    sample: int | None = None,
    repeats: int = 3,
    objective: str = "size",
    max_accuracy_drop: float = 0.1,
    progress: Callable[[str], None] | None = None,
    layout: str | None = None,
    probe: bool = True,
    loader: str | None = None,
    loader_workers: int = 2,
) -> BenchReport:
    """Measure every format x image encoding x dtype policy (x codec setting) on ``src``.

    ``images`` are ``png`` (each format's lossless default) or ``jpeg:Q``,
    ``webp:Q``, ``jxl:Q``; ``dtypes`` are dtype policies (``keep``, ``float16``,
    ``bfloat16``, ``round:N``, ``int8`` ...); see :mod:`.grid`. ``evaluate`` is a
    function ``data -> score | (score, n) | per-example correctness`` or a
    ``"module:function"`` name (imported from the working directory first);
    without it the accuracy probe runs when the features and labels are named
    or recognisable: classification, object detection or segmentation, told by
    the labels' shape or by ``layout`` (``tf-object-detection``, ``segmentation``,
    ...; see :mod:`.accuracy`). ``probe=False`` measures no accuracy at all.
    The first row is ``src`` itself, as it is.

    ``loader`` (``"torch"`` or ``"tf"``) also measures each cell's training
    loader: the records/s and MB/s of a DataLoader with ``loader_workers``
    workers over :func:`dstore.to_torch` (or a :func:`dstore.to_tf_dataset`
    pipeline), warm and cold page cache (see :mod:`.loader`); ``objective="read"``
    then ranks by it.

    ``progress`` gets one line as soon as the inputs are checked (the records to
    measure), one when the original data's accuracy is known, and one per cell
    as it finishes.
    """
    from .report import header_line, recommend

    src = os.fspath(src)
    dtypes = parse_dtypes(dtypes)
    encodings = parse_images(images)
    no_probe: dict[str, object] | None = (
        None
        if probe
        else {"evaluate": evaluate, "features": features, "labels": labels, "layout": layout}
    )
    formats = _check_inputs(formats, repeats, sample, objective, no_probe)
    how = _check_loader(loader, loader_workers)
    if layout is not None:
        layout_kind(layout)  # an unknown name: one line before the input is even opened
    if isinstance(evaluate, str):
        evaluate = load_evaluate(evaluate)
    src_info = api.info(src)
    warnings: list[str] = []
    task: Task | None = None
    if not probe:
        warnings.append("no accuracy probe (--no-probe): sizes and times only")
    elif evaluate is None:
        task = _find_task(src, src_info, features, labels, layout, sample, warnings)
    say = progress or (lambda line: None)
    say(header_line(src, *_sampled_size(src_info.schema, sample)))
    workdir = tempfile.mkdtemp(prefix="dstore-bench-")
    try:
        source, original = _sample_source(src, sample, workdir)
        run = _Run(src, source, workdir, original, task, evaluate, None, repeats, how, say)
        schema = api.info(source).schema
        has_images = any(is_image_batch(a) for fields in original.values() for a in fields.values())
        encodings = _measurable_encodings(encodings, has_images, warnings)
        run.base = base = _baseline(original, task, evaluate, warnings)
        noise = _noise_points(base.score) if base is not None else float("nan")
        total = 1 + sum(
            len(default_settings(fmt, grid)) * len(encodings) * len(dtypes) for fmt in formats
        )
        input_cell = _input_row(run, src_info, sample, schema, noise, total)
        cells = _measure_grid(run, formats, grid, encodings, dtypes, has_images, schema, total)
        settings = {
            "formats": formats,
            "images": [str(e) for e in encodings],
            "dtypes": dtypes,
            "grid": grid,
            "sample": sample,
            "repeats": repeats,
            "objective": objective,
            "max_accuracy_drop": max_accuracy_drop,
            "layout": layout,
            "probe": probe,
            "loader": loader,
            "loader_workers": loader_workers if loader else None,
        }
        report = _report(run, noise, cells, settings, warnings, input_cell)
        report.recommendation, report.reason = recommend(report, objective, max_accuracy_drop)
        return report
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class _Run:
    """What every cell of one bench run is measured against: the user's input, its
    sampled copy in the working folder, the probe and its score on the original data."""

    src: str
    source: str
    workdir: str
    original: dict[str, dict[str, Column]]
    task: Task | None
    evaluate: Evaluate | None
    base: _Timed | None
    repeats: int
    how: LoaderRead | None
    say: Callable[[str], None]


def _measurable_encodings(
    encodings: list[ImageEncoding], has_images: bool, warnings: list[str]
) -> list[ImageEncoding]:
    """``encodings``, without the lossy ones when the data has no image field: they would
    repeat the png rows (dropped, said once)."""
    if has_images or all(e.lossless for e in encodings):
        return encodings
    skipped = ",".join(str(e) for e in encodings if not e.lossless)
    warnings.append(f"no image field in the data: --images {skipped} not measured")
    return [e for e in encodings if e.lossless] or [parse_images(["png"])[0]]


def _baseline(
    original: dict[str, dict[str, Column]],
    task: Task | None,
    evaluate: Evaluate | None,
    warnings: list[str],
) -> _Timed | None:
    """The probe's (or the user's ``evaluate``'s) score on the original data, if any."""
    base = _score(original, task, evaluate)
    if evaluate is None or base is None:
        return base
    # The first call paid the user's imports (scikit-learn: seconds): time a second,
    # as every cell's call is timed with those imports done.
    again = _score(original, task, evaluate)
    if again is not None:
        base.seconds = again.seconds
    if base.n is None:
        warnings.append(
            "evaluate returned a bare score: differences cannot be judged against noise "
            "(return (score, n) or per-example correctness for a band); "
            "only lossless cells can be recommended"
        )
    return base


def _input_row(
    run: _Run, src_info: Any, sample: int | None, schema: Any, noise: float, total: int
) -> Cell:
    """The first row: ``src`` as it is (its size, read time, loader and probe score)."""
    from .report import cell_line, probe_line

    base = run.base
    input_cell = _measure_input(run.src, src_info, sample, run.original, schema, run.repeats)
    if run.how is not None and sample is None and input_cell.error is None:
        _measure_loader(
            input_cell, run.src, src_info.format, list(run.original), run.how, run.repeats
        )
    input_cell.accuracy = base.value if base is not None else float("nan")
    input_cell.accuracy_delta = 0.0
    input_cell.probe_s = base.seconds if base is not None else float("nan")
    input_cell.probe_dtype = base.dtype if base is not None else ""
    if base is not None:
        run.say(probe_line(run.task, base.value, base.chance, noise, base.seconds))
    run.say(cell_line(input_cell, 1, total))
    return input_cell


def _measure_grid(
    run: _Run,
    formats: list[str],
    grid: bool,
    encodings: list[ImageEncoding],
    dtypes: list[str],
    has_images: bool,
    schema: Any,
    total: int,
) -> list[Cell]:
    """One cell per format x setting x image encoding x dtype policy, measured in order."""
    from .report import cell_line

    cells: list[Cell] = []
    for fmt in formats:
        ext = default_extension(fmt)
        codec_cls = get_codec_class(fmt)
        for options in default_settings(fmt, grid):
            for enc in encodings:
                for dtype in dtypes:
                    cell = Cell(
                        fmt,
                        dtype,
                        dict(options),
                        images=str(enc) if has_images else "-",
                        raw_bytes=schema.nbytes,
                        records=schema.records,
                    )
                    cells.append(cell)
                    _measure_cell(run, cell, codec_cls, enc, f"cell-{len(cells)}{ext}")
                    run.say(cell_line(cell, 1 + len(cells), total))
    return cells


def _measure_cell(run: _Run, cell: Cell, codec_cls: Any, enc: ImageEncoding, name: str) -> None:
    cell.unsupported = _unsupported(cell, codec_cls, enc)
    if not cell.unsupported:
        out = os.path.join(run.workdir, name)
        _measure(
            cell,
            run.source,
            out,
            run.original,
            run.task,
            run.evaluate,
            run.base,
            run.repeats,
            run.how,
        )
    if cell.error:  # name the user's file, not the bench's working copy
        cell.error = cell.error.replace(run.source, run.src)


def _report(
    run: _Run,
    noise: float,
    cells: list[Cell],
    settings: dict[str, Any],
    warnings: list[str],
    input_cell: Cell,
) -> BenchReport:
    base = run.base
    return BenchReport(
        run.src,
        run.task,
        base.value if base is not None else float("nan"),
        base.seconds if base is not None else float("nan"),
        noise,
        cells,
        _machine(),
        settings,
        warnings=warnings,
        input=input_cell,
        probe_dtype=input_cell.probe_dtype,
        chance=base.chance if base is not None else float("nan"),
        probe_detail=base.detail if base is not None else "",
    )


def _find_task(
    src: str,
    info: Any,
    features: str | None,
    labels: str | None,
    layout: str | None,
    sample: int | None,
    warnings: list[str],
) -> Task | None:
    """The probe's task, its labels checked; None (and a warning) when none is recognisable.

    Fields named by the caller that do not work, and labels found that no probe can
    use, are errors (one line, before any work); nothing recognisable only a warning.
    """
    try:
        task = find_task(info.schema, features, labels, layout)
    except LabelError as e:
        raise LabelError(f"{src}: {e}") from None
    except DstoreError as e:
        if features is not None or labels is not None or layout is not None:
            raise type(e)(f"{src}: {e}") from None
        warnings.append(f"no accuracy probe: {e}")
        return None
    require_sklearn()
    # The label values, read a chunk at a time (masks are as big as the tiles' pixels): a
    # label the probe cannot learn from is refused now, not after the first minutes.
    with api.open(src) as ds:
        for split in (task.train, task.test):
            if split is None:
                continue
            col = ds[split][task.labels]
            stop = ds[split].count if sample is None else min(sample, ds[split].count)
            step = 256
            chunks = (np.asarray(col[i : min(i + step, stop)]) for i in range(0, stop, step))
            check_labels(task, split, chunks, src)
    return task


def _sampled_size(schema: Any, sample: int | None) -> tuple[int, int]:
    """Records and raw bytes the bench will measure (the first ``sample`` of each split)."""
    records = raw = 0
    for split in schema.splits.values():
        n = split.count if sample is None else min(sample, split.count)
        records += n
        raw += split.nbytes // split.count * n if split.count else 0
    return records, raw


def _noise_points(score: Score) -> float:
    """Twice the standard error (points) of the original's score; NaN: unknown.

    From the per-example values when given (0/1 correctness gives the binomial
    p(1 - p); a tile's Jaccard index or pixel accuracy lies between), else binomial.
    """
    if score.correct is not None and len(score.correct):
        var = float(np.var(score.correct))
        return 200 * math.sqrt(max(var, 1e-12) / len(score.correct))
    if score.n:
        p = score.value
        return 200 * math.sqrt(max(p * (1 - p), 1e-12) / score.n)
    return float("nan")


@dataclass
class _Timed:
    """A score with the seconds it took and the dtype the probe trained on."""

    score: Score
    seconds: float
    dtype: str
    chance: float = float("nan")
    detail: str = ""

    @property
    def value(self) -> float:
        return self.score.value

    @property
    def n(self) -> int | None:
        return self.score.n


def _score(
    data: Mapping[str, Mapping[str, Column]], task: Task | None, evaluate: Evaluate | None
) -> _Timed | None:
    if evaluate is not None:
        t = time.perf_counter()
        result = evaluate(data)
        seconds = time.perf_counter() - t
        name = getattr(evaluate, "__name__", "evaluate")
        return _Timed(to_score(result, name), seconds, "")
    if task is not None:
        res = run_probe(data, task)
        return _Timed(res.score, res.seconds, res.dtype, res.chance, res.detail)
    return None


def _unsupported(cell: Cell, codec_cls: Any, enc: ImageEncoding) -> str | None:
    """Why this dstore (or this format) cannot write ``cell``; None when it can."""
    why = dtype_support(cell.dtype)
    if why:
        return why
    if enc.lossless:
        return None
    opts = image_options(codec_cls, cell.format, enc)
    if isinstance(opts, str):
        return opts
    cell.image_options = opts
    return None


def _measure_input(
    src: str,
    info: Any,
    sample: int | None,
    original: Mapping[str, Mapping[str, Column]],
    schema: Any,
    repeats: int,
) -> Cell:
    """The user's input as it is: bytes on disk (pro rata when sampled) and read time."""
    cell = Cell(
        info.format,
        "as is",
        {},
        images="as is",
        raw_bytes=schema.nbytes,
        records=schema.records,
        is_input=True,
        bit_exact=True,
    )
    total = info.schema.records or 1
    cell.bytes = round(info.bytes_on_disk * schema.records / total)
    try:
        _read_all(src, info.format, sample)  # untimed, as for every cell
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            _read_all(src, info.format, sample)
            times.append(time.perf_counter() - t)
        cell.read_s = statistics.median(times)
    except DstoreError as e:
        cell.error = f"{type(e).__name__}: {e}"
    return cell


def _check_loader(loader: str | None, workers: int) -> LoaderRead | None:
    """The ``--read`` settings, checked (and the loader's library found) before any work."""
    if loader is None:
        return None
    if loader not in LOADERS:
        raise UsageError(f"--read must be one of {', '.join(LOADERS)}. Got {loader!r}.")
    if workers < 0:
        raise UsageError(f"--workers must be >= 0. Got {workers}.")
    import importlib.util

    if loader == "torch" and importlib.util.find_spec("torch") is None:
        raise MissingDependencyError("bench", "torch", "torch", what="dstore bench --read torch")
    if loader == "tf" and importlib.util.find_spec("tensorflow") is None:
        raise MissingDependencyError("bench", "tf", "tensorflow", what="dstore bench --read tf")
    return LoaderRead(loader, workers)


def _measure_loader(
    cell: Cell, path: str, fmt: str, splits: list[str], how: LoaderRead, repeats: int
) -> None:
    speed = measure_loader(path, fmt, splits, cell.bytes, how, repeats)
    cell.loader_rps, cell.loader_mbps = speed.records_per_s, speed.mb_per_s
    cell.loader_cold_rps = speed.cold_records_per_s


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
    request = {
        "source": source,
        "out": out,
        "format": cell.format,
        "dtype": cell.dtype,
        "options": cell.write_options,
        "repeats": repeats,
        "result": result_path,
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
            return
        result = load_json_file(result_path, "bench result")
    finally:
        for path in (request_path, result_path):
            if os.path.exists(path):
                os.remove(path)
    cell.peak_write_mb = result["peak_rss"] / 2**20
    if "error" in result:
        cell.error = result["error"]
    else:
        cell.write_s = statistics.median(result["write_s"])


#: Errors that mean "this format cannot store that", not "something broke".
_UNSUPPORTED_ERRORS = (
    "MissingDependencyError",
    "UnsupportedDtypeError",
    "CodecLibraryMissing",  # an image codec library imagecodecs was built without
)


def _measure(
    cell: Cell,
    source: str,
    out: str,
    original: dict,
    task: Task | None,
    evaluate: Evaluate | None,
    base: _Timed | None,
    repeats: int,
    how: LoaderRead | None = None,
) -> None:
    try:
        _write_in_child(cell, source, out, repeats)
        if cell.error:
            if cell.error.split(":", 1)[0] in _UNSUPPORTED_ERRORS:
                cell.unsupported, cell.error = cell.error.split(": ", 1)[-1], None
            return
        cell.bytes = path_size(out)
        got = _read_all(out, cell.format)  # untimed: the first read pays imports and caches
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            _read_all(out, cell.format)
            times.append(time.perf_counter() - t)
        cell.read_s = statistics.median(times)
        if how is not None:
            _measure_loader(cell, out, cell.format, list(original), how, repeats)
        cell.max_abs_error, cell.max_rel_error, cell.bit_exact = _errors(original, got)
        scored = _score(got, task, evaluate)
        if scored is not None and base is not None:
            cell.accuracy, cell.probe_s, cell.probe_dtype = (
                scored.value,
                scored.seconds,
                scored.dtype,
            )
            cell.accuracy_delta = 100 * (cell.accuracy - base.value)
            cell.band = band_points(base.score, scored.score)
            cell.within_noise = (
                None if np.isnan(cell.band) else bool(abs(cell.accuracy_delta) <= cell.band)
            )
            if cell.bit_exact and cell.accuracy != base.value:
                cell.error = "honesty check failed: lossless data gave a different accuracy"
    except DstoreError as e:
        cell.error = f"{type(e).__name__}: {e}"
    finally:
        remove_path(out)
