"""dstore bench on label-maker's three tasks: classification, object detection (which
classes are present) and segmentation (pixel accuracy), on tiles cropped from real photos
with labels drawn from the photos' own dark and bright regions; plus --no-probe, labels no
probe can use, the progress lines on a non-terminal stderr, the 120-column table and a
plot whose labels never overlap."""

from __future__ import annotations

import csv
import json
import random
import re

import numpy as np
import pytest

from dstore.bench import plot as plot_mod
from dstore.bench import report as report_mod
from dstore.bench.accuracy import Task, class_presence, run_probe
from dstore.bench.results import BenchReport, Cell
from dstore.cli import main
from dstore.demo import label_maker_arrays, make_label_maker_npz

pytest.importorskip("sklearn")
pytest.importorskip("skimage")

# the bench's working folders in this test's own temp dir (autouse), and the one-line
# refusal check: the same as test_bench's
from test_bench import _one_error_line, _own_tempdir  # noqa: F401  # tests/ is on sys.path

FAST = ["--formats", "npz", "--dtypes", "keep", "--repeats", "1"]


@pytest.fixture(scope="module")
def od_npz(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("od") / "data.npz")
    return make_label_maker_npz(path, n=90, size=64, seed=2, task="object-detection")


@pytest.fixture(scope="module")
def seg_npz(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("seg") / "data.npz")
    return make_label_maker_npz(path, n=90, size=64, seed=3, task="segmentation")


def _table(out: str) -> list[str]:
    """The table's lines: its heading row to the footnotes, the legend or the recommendation."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("format "))
    ends = ("[", "images:", "compression:", "recommendation:")
    end = next(i for i, ln in enumerate(lines) if i > start and ln.startswith(ends))
    return lines[start:end]


def _run(capsys, argv: list[str]) -> tuple[str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return captured.out, captured.err


# ------------------------------------------------------------------- the three probes


def test_object_detection_end_to_end(od_npz, tmp_path, capsys):
    y = np.load(od_npz)["y_train"]
    assert y.shape[1:] == (8, 5) and y.dtype == np.uint8  # label-maker's layout, zero-padded
    report = str(tmp_path / "r.json")
    out, err = _run(
        capsys, ["bench", od_npz, *FAST, "--report", report, "--plot", str(tmp_path / "p.png")]
    )
    assert "probe: object detection (classes present)" in out
    assert "2 classes (1, 2)" in out  # dark and bright regions, label-maker's 1-based ids
    with open(report) as f:
        data = json.load(f)
    assert data["probe"] == "object detection (classes present)"
    assert data["task"]["kind"] == "detection"
    # a real signal: far above the constant guess of the commonest class set
    assert data["baseline_accuracy"] > data["chance"] + 0.15, data
    (cell,) = data["cells"]
    assert cell["bit_exact"] and cell["accuracy"] == data["baseline_accuracy"]
    assert cell["accuracy_delta"] == 0 and cell["band"] == 0
    # progress on stderr (not a terminal here): the plan first (cells, records, an estimate
    # of the time), the original's score, then one line per cell with the time left
    lines = err.splitlines()
    assert re.fullmatch(
        rf"dstore bench {re.escape(od_npz)}: 1 cells on all 90 records, about \d+ s", lines[0]
    )
    assert lines[1].startswith("probe: object detection (classes present) on 62 train and 19 test")
    assert lines[2].startswith("[0/1] input (npz): 1.1 MB, read ")
    assert lines[3].startswith("[1/1] npz png: ") and "delta +0.00 pts" in lines[3]
    assert len(lines) == 4
    assert all(len(ln) <= 120 for ln in _table(out))


def test_segmentation_end_to_end(seg_npz, tmp_path, capsys):
    y = np.load(seg_npz)["y_train"]
    assert y.shape[1:] == (64, 64, 1) and set(np.unique(y)) == {0, 1, 2}
    md, rows = str(tmp_path / "r.md"), str(tmp_path / "r.csv")
    out, _ = _run(capsys, ["bench", seg_npz, *FAST, "--report", rows])
    assert "probe: segmentation (pixel accuracy)" in out
    _run(capsys, ["bench", seg_npz, *FAST, "--report", md])
    with open(md) as f:
        assert "probe: segmentation (pixel accuracy)" in f.read()
    with open(rows) as f:
        table = list(csv.DictReader(f))
    assert {r["probe"] for r in table} == {"segmentation (pixel accuracy)"}
    acc = [float(r["accuracy"]) for r in table]
    assert acc[0] == acc[1] > 0.8  # lossless: the same pixels right


def test_segmentation_probe_scores_the_same_pixels_and_sees_damage():
    """The pixels are seeded: the same data scores the same; tiles posterised to two levels
    per channel (the colour the masks were drawn from, mostly gone) score lower."""
    x, y = label_maker_arrays(120, 64, seed=4, task="segmentation")
    task = Task("train", "test", "x", "y", "segmentation")

    def data(xx: np.ndarray) -> dict:
        return {"train": {"x": xx[:80], "y": y[:80]}, "test": {"x": xx[80:], "y": y[80:]}}

    base = run_probe(data(x), task)
    again = run_probe(data(x.copy()), task)
    assert base.accuracy == again.accuracy and np.array_equal(base.correct, again.correct)
    assert base.accuracy > base.chance + 0.2 and base.correct.shape == (40,)
    posterised = (x // 128 * 128 + 64).astype(np.uint8)
    assert run_probe(data(posterised), task).accuracy < base.accuracy - 0.02


def test_classification_end_to_end(label_maker_npz, capsys):
    out, err = _run(capsys, ["bench", label_maker_npz, *FAST])
    assert "probe: classification: SGD log-loss classifier on 'x' -> 'y'" in out
    assert err.splitlines()[1].startswith("probe: classification on 40 train and 10 test records")


@pytest.mark.parametrize(
    "pad",
    [0, -1],
)
def test_class_presence_reads_both_paddings(pad):
    y = np.full((3, 4, 5), pad, np.int16)
    y[0, 0] = [1, 2, 30, 40, 2]
    y[0, 1] = [5, 5, 9, 9, 1]
    y[2, 0] = [0, 0, 10, 10, 2]
    classes, present = class_presence(y)
    assert classes.tolist() == [1, 2]
    assert present.tolist() == [[True, True], [False, False], [False, True]]


def test_layout_names_the_task(od_npz, capsys):
    out, _ = _run(capsys, ["bench", od_npz, *FAST, "--layout", "tf-object-detection"])
    assert "probe: object detection (classes present)" in out


# -------------------------------------------------------------------- --no-probe


def test_no_probe_gives_sizes_and_times_only(od_npz, tmp_path, capsys):
    rows = str(tmp_path / "r.csv")
    out, err = _run(capsys, ["bench", od_npz, *FAST, "--no-probe", "--report", rows])
    heading = _table(out)[0].split()
    assert heading[:4] == ["format", "images", "dtype", "size"]
    assert not {"acc", "acc %", "delta", "+/-", "accuracy"} & set(heading)
    assert "probe:" not in out and "no accuracy probe (--no-probe)" in out
    assert not any(ln.startswith("probe:") for ln in err.splitlines())
    with open(rows) as f:
        fields = csv.DictReader(f).fieldnames
    assert "accuracy" not in fields and "accuracy_delta" not in fields and "bytes" in fields
    out, _ = _run(capsys, ["bench", od_npz, *FAST, "--no-probe", "--wide"])
    assert "accuracy" not in _table(out)[0] and "bytes/record" in _table(out)[0]


def test_no_probe_help_and_conflicts(od_npz, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help_text = capsys.readouterr().out
    assert "--no-probe" in help_text and "--wide" in help_text and "--layout" in help_text
    _one_error_line(
        capsys,
        ["bench", od_npz, "--no-probe", "--labels", "y"],
        "UsageError: --no-probe measures no accuracy, so --labels has nothing to do",
    )


# ------------------------------------------------------- labels no probe can use


def _npz(tmp_path, name: str, y_train: np.ndarray, y_test: np.ndarray) -> str:
    x, _ = label_maker_arrays(len(y_train) + len(y_test), 32, seed=6)
    path = str(tmp_path / name)
    np.savez(
        path, x_train=x[: len(y_train)], y_train=y_train, x_test=x[len(y_train) :], y_test=y_test
    )
    return path


@pytest.mark.parametrize(
    "case,contains",
    [
        ("shape", "has records of shape (3, 7), features 'x' (32, 32, 3): the probe reads"),
        ("one-class", "holds one class only (1): the probe needs two or more"),
        ("regression", "holds 0.5, not a class id"),
        ("no-boxes", "holds no box: there is no class to find"),
        ("layout", "--layout asks for segmentation (pixel accuracy), whose labels are masks"),
        ("unknown-layout", "UsageError: --layout 'tf-keypoints': the accuracy probe reads"),
    ],
)
def test_unusable_labels_are_one_line(tmp_path, capsys, case, contains):
    n = 12
    extra: list[str] = []
    if case == "shape":
        y = np.zeros((n, 3, 7), np.uint8)
    elif case == "one-class":
        y = np.ones(n, np.int64)
    elif case == "regression":
        y = np.linspace(0, 5.5, n)
    elif case == "no-boxes":
        y = np.zeros((n, 4, 5), np.uint8)
    else:
        y = np.zeros((n, 4, 5), np.uint8)
        extra = ["--layout", "segmentation" if case == "layout" else "tf-keypoints"]
    path = _npz(tmp_path, f"{case}.npz", y[:8], y[8:])
    _one_error_line(capsys, ["bench", path, *FAST, *extra], contains)
    if case != "unknown-layout":
        _one_error_line(capsys, ["bench", path, *extra], f"LabelError: {path}: labels field 'y'")


# ------------------------------------------------------------ the table, the plot


def _crowded_report(
    seed: int, loader: bool = False, source: str = "/data/label-maker/data.npz"
) -> BenchReport:
    """A --grid-sized report: long labels, long notes, cells that coincide or nearly do."""
    rng = random.Random(seed)
    cells = []
    for fmt, opts in [
        ("npz", {}),
        ("npz", {"level": 9}),
        ("hdf5", {"level": 9, "shuffle": True}),
        ("zarr", {"cname": "zstd", "clevel": 7}),
        ("tfrecord", {"compression": "gzip"}),
    ]:
        for images in ("png", "jpeg:95", "jpeg:50", "webp:90"):
            for dtype in ("keep", "float16", "bfloat16", "round:10"):
                lossy = images != "png"
                cell = Cell(fmt, dtype, dict(opts), images=images, raw_bytes=10**8, records=7000)
                cell.bytes = rng.choice([4, 4, 5, 9, 12]) * 10**6 if lossy else 2 * 10**7
                cell.write_s, cell.read_s, cell.peak_write_mb = rng.random() * 30, 1.25, 812.0
                cell.exact = cell.bit_exact = not lossy
                cell.stored = "PNG" if fmt == "tfrecord" else "raw + gzip 9"
                cell.stored = (
                    images.replace("jpeg:", "JPEG q").replace("webp:", "WebP q")
                    if lossy
                    else cell.stored
                )
                cell.max_abs_error = 0.0 if not lossy else 37.0
                cell.loader_rps, cell.shuffled_rps = rng.uniform(200, 900), rng.uniform(100, 800)
                cell.shuffle_quality, cell.ordered_quality = rng.uniform(0.9, 1.0), 0.01
                cell.sampled = 1000
                cell.intervals = {"bytes": [0.98 * cell.bytes, 1.02 * cell.bytes]}
                cell.accuracy = 0.9 - (rng.choice([0, 0, 0.01, 0.03]) if lossy else 0)
                cell.accuracy_delta, cell.band = 100 * (cell.accuracy - 0.9), 2.5
                cell.within_noise, cell.probe_s, cell.probe_dtype = True, 1.5, "float32"
                if dtype == "bfloat16":
                    cell.unsupported = "dtype policy 'bfloat16' is not in this dstore"
                elif fmt == "npz" and lossy:
                    cell.unsupported = (
                        "npz has no -o image_codec=/quality= option (no lossy image encodings)"
                    )
                cells.append(cell)
    cells[-1].error = "CodecIOError: " + "a long error message that goes on " * 6
    task = Task("train", "test", "x", "y", "detection")
    settings = {"loader": "torch"} if loader else {}
    report = BenchReport(source, task, 0.9, 1.5, 2.5, cells, {}, settings)
    report.input = Cell("npz", "as is", {}, bytes=10**8, is_input=True, accuracy=0.9)
    report.input.read_s, report.input.loader_rps = 1.0, 700.0
    report.sample = "sample: 1,000 of 7,000 records (seed 0, stratified by split, 6 parts)"
    report.planned = len(cells)
    return report


def test_table_fits_120_columns_and_wide_has_all():
    report = _crowded_report(1)
    narrow = report_mod.to_text(report)
    table = _table(narrow)
    assert all(len(ln) <= 120 for ln in table), max(table, key=len)
    assert table[0].split()[:3] == ["format", "images", "dtype"] and "acc %" in table[0]
    # the long notes went below the table, numbered, whole
    assert "CodecIOError: a long error message" in narrow.replace("\n    ", " ")
    assert any(row.endswith("  [1]") for row in table) and "[1] not supported: " in narrow
    # one noise figure, defined in the legend below the table
    assert "+/-: the noise of delta: twice the standard error" in narrow
    assert "noise" not in "\n".join(narrow.splitlines()[: narrow.splitlines().index(table[0])])
    wide = report_mod.to_text(report, wide=True)
    heading = _table(wide)[0]
    for name in ("bytes/record", "write peak RSS MB", "train s", "trained as", "+/- pts"):
        assert name in heading
    assert "95% interval" in heading and "+/- bytes 2%" in _table(wide)[1 + 1]
    assert "dtype policy 'bfloat16' is not in this dstore" in _table(wide)[4]


def _drawn_tick_labels(ax) -> list:
    """The tick labels matplotlib draws: ticks inside the view limits, label shown."""
    out = []
    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        lo, hi = min(limits), max(limits)
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            if lo <= tick.get_loc() <= hi:
                out += [lb for lb in (tick.label1, tick.label2) if lb.get_visible()]
    return out


def _text_boxes(fig) -> list[tuple[str, object]]:
    """Every text the figure draws (title, axis labels, ticks, numbers, key, colour bar),
    with its box on the canvas."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [*fig.texts, fig._suptitle]
    for ax in fig.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *_drawn_tick_labels(ax)]
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    unique = list({id(t): t for t in texts if t is not None}.values())  # suptitle is a fig text
    return [
        (t.get_text(), t.get_window_extent(renderer))
        for t in unique
        if t.get_visible() and t.get_text().strip()
    ]


@pytest.mark.parametrize("loader", [False, True])
def test_plot_text_never_overlaps(tmp_path, loader):
    """Numbers, key, ticks, axis labels, colour bar and title: no two text boxes overlap
    (as the renderer lays them out), on crowded reports with one panel or two."""
    for seed in range(3):
        report = _crowded_report(seed, loader=loader)
        fig = plot_mod.figure(report)
        boxes = _text_boxes(fig)
        for i, (ta, a) in enumerate(boxes):
            for tb, b in boxes[i + 1 :]:
                assert not a.overlaps(b), (seed, ta, tb)
        axes = [ax for ax in fig.axes if ax.get_xlabel().startswith("size")]
        assert len(axes) == (2 if loader else 1)
        assert axes[0].get_ylabel() == "write time (s)"
        if loader:
            assert axes[1].get_ylabel() == "torch loader (records/s)"
        measured = [c for c in report.cells if c.measured]
        for ax in axes:
            labels = [t for t in ax.texts if t.get_gid() == "cell-number"]
            numbered = sorted(int(n) for t in labels for n in t.get_text().split(","))
            assert numbered == list(range(1, len(measured) + 1))  # every cell, once
        key = next(ax for ax in fig.axes if ax.get_legend() is not None).get_legend().get_texts()
        assert sum(1 for t in key if t.get_text()[:1].isdigit()) == len(measured)
        assert (
            fig._suptitle.get_text()
            == "dstore bench: data.npz, probe: object detection (classes present)"
        )
    plot_mod.save_plot(report, str(tmp_path / "p.png"))
    with open(tmp_path / "p.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_title_names_a_folder_input():
    for source, name in (("/data/tiles/", "tiles"), ("tiles", "tiles"), ("data/*.json", "*.json")):
        fig = plot_mod.figure(_crowded_report(0, source=source))
        assert fig._suptitle.get_text().startswith(f"dstore bench: {name}, probe:")
