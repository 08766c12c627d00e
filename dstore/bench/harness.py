"""``dstore.bench``: the cells worth measuring, measured with bounded memory and time.

Inputs are checked before any work (formats, dtype policies, image choices, the
probe's fields and scikit-learn, the user's evaluation function, a report to
resume). :mod:`.plan` keeps only the cells that change what is stored;
:mod:`.sample` picks the records (all of small data, a seeded stratified sample of
large data) and copies them in one streamed pass; the input's own row and the
original's probe score come first; then each cell (:mod:`.measure`), the report
saved after each one (:mod:`.progress`). :mod:`.recommend` compares every cell
with the input as it is.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from .. import api
from ..errors import DstoreError, UsageError
from ..sources.opening import open_source
from .checks import check_inputs, check_loader, find_checked_task, sample_size
from .grid import parse_dtypes, parse_images
from .inputs import has_images, input_row, lossy_note
from .loader import LoaderRead, import_loader
from .measure import Workspace, input_loader, measure_cell
from .plan import CellSpec, plan_cells
from .progress import (
    Eta,
    cell_line,
    input_fingerprint,
    load_resumable,
    plan_line,
    probe_line,
    save_partial,
)
from .recommend import recommend
from .report import save_report
from .results import BenchReport, Cell
from .sample import plan_sample, write_parts
from .scan import scan
from .scores import Evaluate, load_evaluate
from .scoring import Scorer, noise_points, probe_roles
from .tasks import Task, layout_kind

__all__ = ["DEFAULT_DTYPES", "bench"]

DEFAULT_DTYPES = ("keep", "float32", "float16")


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


def bench(
    src: str | os.PathLike[str],
    *,
    formats: Sequence[str] | None = None,
    dtypes: Sequence[str] = DEFAULT_DTYPES,
    images: Sequence[str] | None = None,
    grid: bool = False,
    evaluate: Evaluate | str | None = None,
    features: str | None = None,
    labels: str | None = None,
    sample: int | str | None = "auto",
    seed: int = 0,
    repeats: int = 3,
    objective: str = "size",
    max_accuracy_drop: float = 0.1,
    progress: Callable[[str], None] | None = None,
    layout: str | None = None,
    probe: bool = True,
    loader: str | None = None,
    loader_workers: int = 2,
    report: str | os.PathLike[str] | None = None,
    resume: bool = False,
) -> BenchReport:
    """Measure every format x image choice x dtype policy (x codec setting) that changes
    what is stored, on ``src``; the first row is ``src`` itself, as it is.

    ``images``: ``png`` (each format's lossless default), ``png:LEVEL``, ``jpeg:Q``,
    ``webp:Q``, ``jxl:Q``; None (auto): ``png`` and ``jpeg:90`` when the data has image
    fields. ``dtypes``: dtype policies; one that changes no field is not measured
    (see :mod:`.plan`). ``sample``: records measured -- ``"auto"`` (every record of
    data up to 512 MiB raw, else a seeded sample of about 192 MiB, ``seed``),
    a number, or ``"off"``; a sample's figures are extrapolated with 95% intervals
    (:mod:`.extrapolate`). ``evaluate``: a function ``data -> score | (score, n) |
    per-example correctness`` or a ``"module:function"`` name, given a bounded,
    seeded choice of records of every split; without it the accuracy probe runs
    when the features and labels are named or recognisable (``layout`` names the
    task). ``probe=False`` measures no accuracy.

    ``loader`` (``"torch"`` or ``"tf"``) also measures each cell's training loader:
    records/s in storage order and with ``shuffle="global"``, and how well shuffled
    the records came (:mod:`.shuffle`). ``report``: a ``.json``, ``.csv`` or ``.md``
    file written after every cell; ``resume=True`` reads it (JSON) and measures only
    the cells it lacks. ``progress`` gets the plan's line first, then one per cell.
    """
    src = os.fspath(src)
    dtypes = parse_dtypes(dtypes)
    if images is not None:
        parse_images(images)
    no_probe: dict[str, object] | None = (
        None
        if probe
        else {"evaluate": evaluate, "features": features, "labels": labels, "layout": layout}
    )
    chosen = check_inputs(formats, repeats, sample, objective, no_probe)
    how = check_loader(loader, loader_workers)
    if layout is not None:
        layout_kind(layout)  # an unknown name: one line before the input is even opened
    if isinstance(evaluate, str):
        evaluate = load_evaluate(evaluate)
    if resume and report is None:
        raise UsageError("--resume continues the report named by --report FILE.json; give it")
    src_info = api.info(src)
    schema = src_info.schema
    warnings: list[str] = []
    task = None
    if not probe:
        warnings.append("no accuracy probe (--no-probe): sizes and times only")
    elif evaluate is None:
        task = find_checked_task(src, src_info, features, labels, layout, warnings)
    images_present = has_images(schema)
    specs, skipped = plan_cells(
        schema,
        chosen,
        named=list(formats or ()),
        dtypes=dtypes,
        images=images,
        grid=grid,
        has_images=images_present,
    )
    plan = plan_sample(
        {s: sp.count for s, sp in schema.splits.items()}, sample_size(sample, schema), seed
    )
    settings = {
        "formats": chosen,
        "images": list(images) if images is not None else "auto",
        "dtypes": dtypes,
        "grid": grid,
        "sample": plan.records if plan.sampled else None,
        "seed": seed,
        "repeats": repeats,
        "objective": objective,
        "max_accuracy_drop": max_accuracy_drop,
        "layout": layout,
        "probe": probe,
        "evaluate": getattr(evaluate, "__name__", None),
        "features": features,
        "labels": labels,
        "loader": loader,
        "loader_workers": loader_workers if loader else None,
    }
    fingerprint = input_fingerprint(src, src_info)
    done = load_resumable(os.fspath(report), fingerprint, settings) if resume and report else {}
    run = _Run(src, src_info, plan, specs, task, evaluate, how, repeats, progress, warnings)
    result = run.report(settings, skipped, fingerprint, images_present)
    with tempfile.TemporaryDirectory(prefix="dstore-bench-") as workdir:
        run.measure(result, workdir, done, report, objective, max_accuracy_drop)
    return result


class _Run:
    """One bench run's state, from the input's copy to the last cell."""

    def __init__(
        self,
        src: str,
        info: Any,
        plan: Any,
        specs: list[CellSpec],
        task: Task | None,
        evaluate: Evaluate | None,
        how: LoaderRead | None,
        repeats: int,
        progress: Callable[[str], None] | None,
        warnings: list[str],
    ) -> None:
        self.src, self.info, self.plan, self.specs = src, info, plan, specs
        self.task, self.evaluate, self.how, self.repeats = task, evaluate, how, repeats
        self.say = progress or (lambda line: None)
        self.warnings = warnings

    def report(
        self,
        settings: dict[str, Any],
        skipped: list[str],
        fingerprint: dict[str, Any],
        images: bool,
    ) -> BenchReport:
        schema = self.info.schema
        with open_source(self.src, None, {})[1] as reader:
            note = lossy_note(schema, reader, self.src)
        out = BenchReport(
            self.src, self.task, float("nan"), float("nan"), float("nan"), [], _machine(), settings
        )
        out.warnings, out.skipped, out.fingerprint = self.warnings, skipped, fingerprint
        out.warnings += [note] if note else []
        out.sample, out.planned = self.plan.describe(), len(self.specs)
        mb = self.plan.records / max(1, schema.records) * schema.nbytes / 1e6
        probe_records = min(3000, self.plan.records) if (self.task or self.evaluate) else 0
        self.eta = Eta(self.specs, mb, probe_records, images)
        setup = self.eta.setup_seconds(self.info.bytes_on_disk / 1e6, mb, self.repeats)
        self.say(plan_line(out, self.plan, self.eta.total() + setup))
        return out

    def measure(
        self,
        out: BenchReport,
        workdir: str,
        done: dict[str, Cell],
        report_path: str | os.PathLike[str] | None,
        objective: str,
        max_drop: float,
    ) -> None:

        with open_source(self.src, None, {})[1] as reader:
            write_parts(reader, self.plan, workdir)
        out.input = input_row(self.src, self.info, self.repeats)
        if self.how is not None:
            import_loader(self.how)
            if not self.plan.sampled and out.input.error is None:
                splits = list(self.info.schema.splits)
                try:
                    input_loader(
                        self.src, self.info.format, splits, self.how, self.repeats, out.input
                    )
                except (DstoreError, ValueError) as e:
                    out.input.shuffle_note = f"loader: {str(e).splitlines()[0]}"
        roles = probe_roles(self.plan, self.task, self.plan.seed)
        scorer = Scorer(self.task, self.evaluate, roles) if (self.task or self.evaluate) else None
        ws = Workspace(
            self.plan,
            workdir,
            roles if scorer else _no_roles(roles),
            scorer.fields if scorer else [],
            self.repeats,
            self.how,
        )
        ws.splits, ws.src = list(self.info.schema.splits), self.src
        ws.schema = self.info.schema
        if self.how is not None:
            ws.keys_part = 0
            ws.keys_split = max(self.plan.parts[0], key=lambda s: len(self.plan.parts[0][s]))
        if scorer is not None:
            found = scan(self.plan.files, "npz", roles, scorer.fields)
            base = scorer.baseline(self.plan.files, found.probe_hash)
            out.baseline_accuracy, out.baseline_probe_s = base.value, base.seconds
            out.noise_points = noise_points(base.score)
            out.probe_dtype, out.chance, out.probe_detail = base.dtype, base.chance, base.detail
            out.input.accuracy, out.input.accuracy_delta = base.value, 0.0
            out.input.probe_s, out.input.probe_dtype = base.seconds, base.dtype
            out.probe_records = _probe_records(roles)
            self.say(
                probe_line(self.task, base.value, base.chance, base.seconds, out.probe_records)
            )
            ws.score = lambda cell, files, h: scorer.score_cell(
                cell, files, cell.format, h, _name(cell)
            )
        total = len(self.specs)
        self.say(cell_line(out.input, 0, total, ""))
        for i, spec in enumerate(self.specs, start=1):
            cell = done.get(_cell(spec, self.info.schema).key)
            earlier = cell is not None
            if cell is None:
                cell = _cell(spec, self.info.schema)
                measure_cell(ws, cell, i)
            self.eta.done(0.0 if earlier or math.isnan(cell.seconds) else cell.seconds, earlier)
            out.cells.append(cell)
            out.recommendation, out.reason, out.keep_input = recommend(out, objective, max_drop)
            if report_path is not None:
                save_partial(out, os.fspath(report_path), save_report)
            left = Eta.duration(self.eta.left(i)) + " left" if i < total else ""
            if earlier:
                left = "from the earlier report" + (f", {left}" if left else "")
            self.say(cell_line(cell, i, total, left))


def _no_roles(roles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{s: r * 0 for s, r in part.items()} for part in roles]


def _probe_records(roles: list[dict[str, Any]]) -> str:
    train = sum(int((r == 1).sum()) for part in roles for r in part.values())
    test = sum(int((r == 2).sum()) for part in roles for r in part.values())
    return f"{train:,} train and {test:,} test records" if test else f"{train:,} records"


def _name(cell: Cell) -> str:
    return f"{cell.format} {cell.images} {cell.dtype}".replace(" - ", " ")


def _cell(spec: CellSpec, schema: Any) -> Cell:
    return Cell(
        spec.format,
        spec.dtype,
        dict(spec.options),
        images=spec.images,
        image_options=dict(spec.image_options),
        stored=spec.stored,
        raw_bytes=schema.nbytes,
        records=schema.records,
    )
