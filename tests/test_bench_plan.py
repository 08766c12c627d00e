"""dstore bench measures only choices that differ, saves its report after every cell and
resumes it, treats the input as a candidate (and may say "keep it"), and says when the
input is lossy already -- on real photo tiles and real-image features."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest

# the bench's working folders in this test's own temp dir (autouse), and the one-line
# refusal check: the same as test_bench's
from test_bench import _one_error_line, _own_tempdir  # noqa: F401  # tests/ is on sys.path

import dstore
from dstore.bench.extrapolate import extrapolate, extrapolate_ratio
from dstore.bench.plan import plan_cells
from dstore.bench.sample import PARTS, plan_sample
from dstore.cli import main
from dstore.demo import hog_features, photo_tiles
from dstore.errors import UsageError

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def tiles_npz(tmp_path_factory) -> str:
    x, y = photo_tiles(120, 64, seed=8)
    path = str(tmp_path_factory.mktemp("plan") / "tiles.npz")
    np.savez(path, x_train=x[:80], y_train=y[:80], x_test=x[80:], y_test=y[80:])
    return path


@pytest.fixture(scope="module")
def feats_npz(tmp_path_factory) -> str:
    feats, labels = hog_features(400, seed=6)
    path = str(tmp_path_factory.mktemp("plan") / "features.npz")
    np.savez(
        path,
        features_train=feats[:300],
        labels_train=labels[:300],
        features_test=feats[300:],
        labels_test=labels[300:],
    )
    return path


# ------------------------------------------------------------ only choices that differ


def _schema(path: str):
    return dstore.info(path).schema


def test_dtype_policies_that_change_nothing_are_not_cells(tiles_npz, feats_npz):
    cells, notes = plan_cells(
        _schema(tiles_npz), ["npz", "zarr"], dtypes=["keep", "float32", "float16"], has_images=True
    )
    assert {c.dtype for c in cells} == {"keep"}  # integer tiles: every cast is a no-op
    assert "dtypes not measured: float32, float16: no field is floating" in notes
    cells, notes = plan_cells(
        _schema(feats_npz), ["npz"], dtypes=["keep", "float32", "float16", "float64"]
    )
    assert [c.dtype for c in cells] == ["keep", "float16", "float64"]  # float32 features
    assert "dtypes not measured: float32 (stores what keep does)" in notes


def test_image_choices_follow_what_each_codec_can_store(tiles_npz):
    formats = ["npz", "zarr", "hdf5", "tfrecord", "webdataset"]
    cells, notes = plan_cells(
        _schema(tiles_npz), formats, images=["png", "png:fastest", "jpeg:90"], has_images=True
    )
    got = {(c.format, c.images): c.stored for c in cells}
    assert got == {
        ("npz", "png"): "raw + deflate 6",
        ("zarr", "png"): "raw + blosc zstd 3",
        ("zarr", "jpeg:90"): "JPEG q90",
        ("hdf5", "png"): "raw + gzip 4",
        ("tfrecord", "png"): "PNG",
        ("tfrecord", "png:fastest"): "PNG fastest",
        ("tfrecord", "jpeg:90"): "JPEG q90",
        ("webdataset", "png"): "PNG",
        ("webdataset", "png:fastest"): "PNG fastest",
        ("webdataset", "jpeg:90"): "JPEG q90",
    }
    assert "images png:fastest not measured on npz, zarr, hdf5: the format cannot store it" in notes
    # HDF5 has the option, and refuses lossy images before writing a byte: not a cell either
    assert "images jpeg:90 not measured on npz, hdf5: the format cannot store it" in notes
    # the default on image data: lossless and one JPEG, where the format has it
    cells, _ = plan_cells(_schema(tiles_npz), formats, has_images=True)
    assert {c.images for c in cells} == {"png", "jpeg:90"}


def test_text_formats_hold_no_tiles_unless_named(tiles_npz, feats_npz):
    cells, notes = plan_cells(_schema(tiles_npz), ["npz", "json", "jsonl"], has_images=True)
    assert {c.format for c in cells} == {"npz"}
    assert any(n.startswith("formats not measured: json, jsonl: text formats") for n in notes)
    cells, notes = plan_cells(
        _schema(tiles_npz), ["npz", "json"], named=["npz", "json"], has_images=True
    )
    assert {c.format for c in cells} == {"npz", "json"}
    assert not any(n.startswith("formats not measured") for n in notes)
    cells, _ = plan_cells(_schema(feats_npz), ["npz", "json"])  # features: JSON holds them
    assert {c.format for c in cells} == {"npz", "json"}


# ------------------------------------------------------------------ the sample


def test_sample_is_seeded_stratified_and_in_disjoint_parts():
    counts = {"train": 7000, "test": 1500, "val": 500}
    plan = plan_sample(counts, 900, seed=3)
    assert plan.sampled and len(plan.parts) == PARTS
    for split, count in counts.items():
        picked = np.concatenate([p[split] for p in plan.parts])
        assert len(np.unique(picked)) == len(picked)  # disjoint
        assert picked.min() >= 0 and picked.max() < count
        sizes = {len(p[split]) for p in plan.parts}
        assert len(sizes) == 1  # equal parts
        assert abs(len(picked) - 900 * count / 9000) <= PARTS  # the split's share
        assert set(plan.tiny[split]) <= set(plan.parts[0][split])
    again = plan_sample(counts, 900, seed=3)
    other = plan_sample(counts, 900, seed=4)
    assert all(
        np.array_equal(a["train"], b["train"]) for a, b in zip(plan.parts, again.parts, strict=True)
    )
    assert not np.array_equal(plan.parts[0]["train"], other.parts[0]["train"])
    whole = plan_sample(counts, None)
    assert not whole.sampled and whole.records == 9000


def test_extrapolation_and_its_interval():
    """A fixed cost plus a cost per record is recovered; the ratio to a proxy removes the
    luck of the draw; the interval narrows as the parts agree."""
    rng = np.random.default_rng(0)
    sizes = rng.lognormal(10, 0.3, 9000)  # records' sizes
    proxy = sizes * rng.normal(1, 0.05, 9000)  # a proxy that follows them
    picks = rng.permutation(9000)[:1200].reshape(6, 200)
    fixed = 5000.0
    parts = [(200, fixed + sizes[p].sum()) for p in picks]
    tiny = (3, fixed + sizes[picks[0][:3]].sum())
    est = extrapolate(9000, tiny, parts)
    assert est.lo < est.value < est.hi
    by_ratio = extrapolate_ratio(
        1200,
        9000,
        [(x, proxy[p].sum()) for (_, x), p in zip(parts, picks, strict=True)],
        proxy.sum(),
        (tiny[1], proxy[picks[0][:3]].sum()),
    )
    truth = fixed + sizes.sum()
    assert abs(by_ratio.value - truth) / truth < 0.01
    assert by_ratio.hi - by_ratio.lo < est.hi - est.lo  # the proxy's information
    exact = extrapolate(10, (1, 2.0), [(4, 5.0), (4, 5.0), (4, 5.0)])  # x = 1 + n
    assert exact.value == pytest.approx(11.0) and exact.hi == pytest.approx(exact.lo)


# ------------------------------------------------------ saved as it goes, and resumed


class _StopAfter:
    def __init__(self, cells: int) -> None:
        self.cells, self.lines = cells, []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if line.startswith(f"[{self.cells}/"):
            raise KeyboardInterrupt


def test_an_interrupted_run_leaves_its_report_and_resumes(tiles_npz, tmp_path):
    report = str(tmp_path / "r.json")
    markdown = str(tmp_path / "r.md")
    args = {"formats": ["npz", "zarr", "hdf5"], "probe": False, "repeats": 1, "images": ["png"]}
    stop = _StopAfter(2)
    with pytest.raises(KeyboardInterrupt):
        dstore.bench(tiles_npz, report=report, progress=stop, **args)
    with open(report) as f:
        partial = json.load(f)  # valid JSON: written whole after each cell, then renamed
    assert partial["complete"] is False and partial["planned"] == 3
    assert [c["format"] for c in partial["cells"]] == ["npz", "zarr"]
    # no temporary report left beside it, and the working folder is gone
    assert sorted(os.listdir(tmp_path)) == ["r.json", "tmp"] and not os.listdir(tmp_path / "tmp")
    # a Markdown report is written as it goes too
    with pytest.raises(KeyboardInterrupt):
        dstore.bench(tiles_npz, report=markdown, progress=_StopAfter(1), **args)
    with open(markdown) as f:
        assert "partial: 1 of 3 cells measured so far" in f.read()
    # --resume measures only what is missing, and keeps what was measured
    lines: list[str] = []
    done = dstore.bench(tiles_npz, report=report, resume=True, progress=lines.append, **args)
    cell_lines = [ln for ln in lines if ln.startswith("[") and not ln.startswith("[0/")]
    assert [("from the earlier report" in ln) for ln in cell_lines] == [True, True, False]
    assert [c.format for c in done.cells] == ["npz", "zarr", "hdf5"] and done.complete
    assert [c.bytes for c in done.cells[:2]] == [c["bytes"] for c in partial["cells"]]
    with open(report) as f:
        assert json.load(f)["complete"] is True


def test_resume_refuses_another_input_or_other_settings(tiles_npz, tmp_path, capsys):
    report = str(tmp_path / "r.json")
    args = ["--formats", "npz", "--no-probe", "--repeats", "1", "--images", "png"]
    assert main(["bench", tiles_npz, *args, "--report", report]) == 0
    capsys.readouterr()
    _one_error_line(
        capsys,
        ["bench", tiles_npz, *args[:-2], "--images", "png,jpeg:90", "--report", report, "--resume"],
        "was measured with other settings (images)",
    )
    other = str(tmp_path / "other.npz")
    shutil.copy(tiles_npz, other)
    with open(other, "ab") as f:
        f.write(b"\0")  # another file (size, time)
    _one_error_line(
        capsys,
        ["bench", other, *args, "--report", report, "--resume"],
        "was measured on another input",
    )
    _one_error_line(
        capsys,
        ["bench", tiles_npz, *args, "--report", str(tmp_path / "r.md"), "--resume"],
        "--resume reads the JSON report",
    )
    with pytest.raises(UsageError, match="--resume continues"):
        dstore.bench(tiles_npz, resume=True)


# ------------------------------------------------------------- the input is a candidate


def test_a_good_input_is_kept(feats_npz, tmp_path, capsys):
    """A feature file already stored as a deflated npz: converting to npz again would
    change nothing, and JSON is larger and slower; the advice is to keep it."""
    good = str(tmp_path / "good.npz")
    dstore.convert(feats_npz, good)  # dstore's npz: deflate 6
    for formats in ("npz", "json"):
        rc = main(["bench", good, "--formats", formats, "--dtypes", "keep", "--repeats", "1"])
        out = capsys.readouterr().out
        assert rc == 0
        lines = out.splitlines()
        at = next(i for i, ln in enumerate(lines) if ln.startswith("recommendation:"))
        assert lines[at] == f"recommendation: keep your input as it is ({good})", formats
        assert lines[at + 1].startswith("  why: no cell is smaller than your input")
        assert not any(ln.startswith("  run: ") for ln in lines[at:])
    report = dstore.bench(good, formats=["npz", "json"], dtypes=["keep"], repeats=1)
    assert report.keep_input and report.recommendation is report.input


def test_a_smaller_cell_beats_the_input(feats_npz):
    report = dstore.bench(feats_npz, formats=["npz"], dtypes=["keep", "float16"], repeats=1)
    best = report.recommendation
    assert not report.keep_input and best.bytes < 0.98 * report.input.bytes
    assert best.format == "npz"


def test_a_lossy_input_is_said_so(feats_npz, tmp_path, capsys):
    half = str(tmp_path / "half.npz")
    dstore.convert(feats_npz, half, dtype="float16")
    rc = main(["bench", half, "--formats", "npz", "--repeats", "1"])
    out = capsys.readouterr().out
    assert rc == 0
    note = next(ln for ln in out.replace("\n  ", " ").splitlines() if ln.startswith("note: "))
    assert "already stores features (float16)" in note
    assert "accuracy differences are against what it holds" in note
    assert "bench that original" in note
    # float16 of float16 features changes nothing: not a cell
    assert "float16 (stores what keep does)" in out


def test_a_jpeg_input_is_said_so(tiles_npz, tmp_path, capsys):
    """Tiles already stored as JPEG: the accuracy question is against the JPEG pixels."""
    jpeg = str(tmp_path / "tiles.tfrecords")
    dstore.convert(tiles_npz, jpeg, options={"image_codec": "jpeg", "quality": 80})
    rc = main(["bench", jpeg, "--formats", "zarr", "--repeats", "1", "--no-probe"])
    out = capsys.readouterr().out
    assert rc == 0
    note = next(ln for ln in out.replace("\n  ", " ").splitlines() if ln.startswith("note: "))
    assert "already stores x (lossy images)" in note
    assert "accuracy differences are against what it holds" in note


def test_progress_gives_the_plan_and_the_time_left(feats_npz):
    lines: list[str] = []
    dstore.bench(
        feats_npz, formats=["npz", "zarr"], dtypes=["keep"], repeats=1, progress=lines.append
    )
    assert lines[0].startswith(f"dstore bench {feats_npz}: 2 cells on all 400 records, about ")
    assert lines[-2].startswith("[1/2] npz keep: ") and lines[-2].endswith(" left")
    assert lines[-1].startswith("[2/2] zarr keep: ") and "left" not in lines[-1]
    assert not math.isnan(float(lines[-1].split("write ")[1].split(" s")[0]))


def test_ctrl_c_names_the_partial_report(tiles_npz, tmp_path, capsys, monkeypatch):
    """Ctrl-C during the second cell: exit 130, one line naming the report that holds the
    first cell and the option that measures the rest."""
    import importlib

    harness = importlib.import_module("dstore.bench.harness")
    measure = harness.measure_cell

    def interrupted(ws, cell, index):
        if index == 2:
            raise KeyboardInterrupt  # where a real Ctrl-C lands: inside a cell
        measure(ws, cell, index)

    monkeypatch.setattr(harness, "measure_cell", interrupted)
    report = str(tmp_path / "r.json")
    argv = ["bench", tiles_npz, "--formats", "npz,zarr", "--no-probe", "--repeats", "1"]
    rc = main([*argv, "--images", "png", "--report", report])
    captured = capsys.readouterr()
    assert rc == 130 and captured.out == ""
    assert captured.err.splitlines()[-1] == (
        f"interrupted: {report} holds the cells measured so far; "
        "run the same command with --resume to measure the rest"
    )
    with open(report) as f:
        assert [c["format"] for c in json.load(f)["cells"]] == ["npz"]


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet", "webdataset"])
def test_write_work_counts_the_records_a_shard_plan_encodes(fmt):
    """A sharded conversion encodes the first 64 records of each split larger than half a
    shard once more, to size its shards: ``encoded_records`` (the unit the bench
    extrapolates write times in) counts exactly the records ``plan_shards`` asks for,
    so a sample part (splits within a shard) and the whole data (a split beyond) are
    compared per record encoded."""
    from dstore.bench.sample import encoded_records, part_schema
    from dstore.registry import get_codec

    x, y = photo_tiles(130, 64, seed=5)  # 12 kB a tile
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"plan-{fmt}-{os.getpid()}.npz")
    np.savez(path, x_train=x[:100], y_train=y[:100], x_test=x[100:], y_test=y[100:])
    try:
        reader = get_codec("npz").open_reader(path)
        schema = reader.schema
        codec = get_codec(fmt, shard_mb=1)  # train (1.2 MB) is planned, test (0.4 MB) not
        asked: list[int] = []

        def first(split: str, n: int) -> dict:
            asked.append(n)
            return next(iter(reader.iter_batches(split, stop=n)))

        codec.plan_shards(schema, first)
        whole = {s: np.arange(spec.count) for s, spec in schema.splits.items()}
        assert sum(asked) == 64 == codec.planning_records(schema)
        assert encoded_records(codec, schema, whole) == 130 + 64
        small = {"train": np.arange(30), "test": np.arange(10)}
        assert codec.planning_records(part_schema(schema, small)) == 0
        assert encoded_records(codec, schema, small) == 40
        assert get_codec("npz").planning_records(schema) == 0
    finally:
        os.remove(path)
