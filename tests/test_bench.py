"""dstore bench on real-image features: lossless rows are exact, float16 costs what it costs,
and the harness can show a loss (values below float16 resolution) or a refusal (overflow)."""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import random
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import dstore
from dstore.bench import save_plot, save_report
from dstore.bench.recommend import recommend
from dstore.bench.results import BenchReport, Cell
from dstore.cli import main
from dstore.demo import hog_features

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def feats_npz(tmp_path_factory):
    feats, labels = hog_features(400, seed=3)
    path = str(tmp_path_factory.mktemp("bench") / "features.npz")
    np.savez(
        path,
        features_train=feats[:300],
        labels_train=labels[:300],
        features_test=feats[300:],
        labels_test=labels[300:],
    )
    return path, feats, labels


@pytest.mark.slow  # a full bench with the accuracy probe (~8 s)
def test_bench_rows_and_honesty(feats_npz, tmp_path):
    path, _, _ = feats_npz
    report = dstore.bench(
        path, formats=["npz", "zarr", "hdf5", "tfrecord"], dtypes=["keep", "float16"], repeats=1
    )
    assert report.task.features == "features" and report.task.labels == "labels"
    assert 0.3 < report.baseline_accuracy <= 1.0
    assert len(report.cells) == 8
    for cell in report.cells:
        assert cell.error is None, cell.error
        assert cell.bytes > 0 and cell.write_s > 0 and cell.read_s > 0
        # the writing process's own peak: at least the interpreter and numpy, never 0
        assert 15 < cell.peak_write_mb < 2000, cell.peak_write_mb
        if cell.dtype == "keep":
            assert (
                cell.bit_exact
                and cell.accuracy == report.baseline_accuracy
                and cell.accuracy_delta == 0
            )
        else:
            assert not cell.bit_exact and 0 < cell.max_abs_error < 0.01
    keep = {c.format: c.bytes for c in report.cells if c.dtype == "keep"}
    half = {c.format: c.bytes for c in report.cells if c.dtype == "float16"}
    assert all(half[f] < 0.7 * keep[f] for f in keep)  # the float16 cast is what halves the size
    assert report.recommendation is not None and report.reason

    for ext in (".json", ".csv", ".md"):
        out = str(tmp_path / f"r{ext}")
        save_report(report, out)
        assert os.path.getsize(out) > 0
    with open(tmp_path / "r.json") as f:
        data = json.load(f)
    assert (
        len(data["cells"]) == 8
        and data["machine"]["cores"]
        and data["settings"]["dtypes"] == ["keep", "float16"]
    )
    assert data["input"]["label"] == "input (npz)" and data["input"]["bytes"] == os.path.getsize(
        path
    )
    with open(tmp_path / "r.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 9 and rows[0]["is_input"] == "True"  # the input as it is, then the cells
    save_plot(report, str(tmp_path / "p.png"))
    with open(tmp_path / "p.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # a bench with the probe (~5 s)
def test_bench_shows_a_float16_loss(feats_npz, tmp_path):
    """Class signal in differences below float16 resolution (offset 1000: spacing 0.5)."""
    _, feats, labels = feats_npz
    path = str(tmp_path / "fine.npz")
    fine = 1000.0 + feats.astype(np.float64) * 0.05
    np.savez(
        path,
        features_train=fine[:300],
        labels_train=labels[:300],
        features_test=fine[300:],
        labels_test=labels[300:],
    )
    report = dstore.bench(path, formats=["npz"], dtypes=["keep", "float32", "float16"], repeats=1)
    by = {c.dtype: c for c in report.cells}
    assert by["float32"].accuracy_delta > -5
    assert by["float16"].accuracy_delta < -10 and not by["float16"].within_noise
    assert report.recommendation.dtype != "float16"


def test_bench_refuses_float16_overflow(feats_npz, tmp_path):
    _, feats, labels = feats_npz
    path = str(tmp_path / "big.npz")
    np.savez(path, features=feats * 1e6, labels=labels)
    report = dstore.bench(path, formats=["npz"], dtypes=["keep", "float16"], repeats=1)
    by = {c.dtype: c for c in report.cells}
    assert by["float16"].error and "overflow" in by["float16"].error and path in by["float16"].error
    assert report.task.test is None  # no test split: a seeded hold-out was made
    assert report.recommendation.dtype == "keep"


def test_user_evaluate_replaces_probe(feats_npz):
    path, _, _ = feats_npz
    calls = []

    def evaluate(data):
        calls.append(sorted(data))
        return float(np.mean(data["test"]["features"]))

    report = dstore.bench(
        path, formats=["npz"], dtypes=["keep", "float16"], evaluate=evaluate, repeats=1
    )
    # the original twice (the first call pays the imports; the second is timed), then the
    # float16 cell; the keep cell reads back the original's records byte for byte, so it
    # gets the original's score without another call
    assert calls[0] == ["test", "train"] and len(calls) == 3
    assert report.task is None
    keep, half = report.cells
    assert keep.accuracy == report.baseline_accuracy and keep.probe_reused == "the original's"
    assert half.probe_reused == "" and half.accuracy != report.baseline_accuracy


@pytest.mark.slow  # a full bench through the CLI (~7 s)
def test_cli_bench(feats_npz, tmp_path, capsys):
    path, _, _ = feats_npz
    rc = main(
        [
            "bench",
            path,
            "--formats",
            "npz,zarr",
            "--dtypes",
            "keep,float16",
            "--repeats",
            "1",
            "--report",
            str(tmp_path / "b.md"),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "recommendation:" in out and "float16" in out and "zarr" in out
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("recommendation:"))
    block = lines[at : at + 3]  # what, why, the command: three short lines
    assert block[1].startswith("  why: ") and block[2].startswith("  run: ")
    assert block[2].startswith(f"  run: dstore convert {shlex.quote(path)} out.")
    assert "SRC" not in block[2]
    assert all(len(ln) <= 120 for ln in block[:2])
    assert (tmp_path / "b.md").read_text().count("|") > 20


# ------------------------------------------------------------- inputs checked up front


@pytest.fixture(autouse=True)
def _own_tempdir(tmp_path, monkeypatch):
    """The bench's working folders go to this test's own temp dir, so that the check "no
    working folder was made" cannot see another test's or another process's folders."""
    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))


def _one_error_line(capsys, argv: list[str], contains: str) -> None:
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "dstore-bench-*")))
    rc = main(argv)
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert rc == 2, captured
    assert len(lines) == 1 and contains in lines[0], (argv, lines)
    assert captured.out == ""  # no table, no row notes: nothing was measured
    # the check came before any work: no working folder was even made
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "dstore-bench-*"))) == before


@pytest.mark.parametrize(
    "dtypes",
    [
        "foo",
        "keep,float8",
        "float16,bfloat17",
        "keep,FLOAT16",
        "round",
        "round:24",
        "round:x",
        "int8x",
        "int4",
        "keep,,float33",
    ],
)
def test_unknown_dtype_is_one_line(feats_npz, capsys, dtypes):
    path, _, _ = feats_npz
    _one_error_line(capsys, ["bench", path, "--dtypes", dtypes], "UsageError: --dtypes: '")
    # the valid policies are named in the same line
    _one_error_line(
        capsys, ["bench", path, "--dtypes", dtypes], "keep, float32, float16, float64, bfloat16"
    )


@pytest.mark.parametrize(
    "option,name",
    [
        ("--labels", "label"),
        ("--labels", "Labels"),
        ("--features", "feature"),
        ("--features", "x"),
        ("--labels", "features/extra"),
    ],
)
def test_missing_probe_field_lists_the_fields(feats_npz, capsys, option, name):
    path, _, _ = feats_npz
    role = option.lstrip("-")
    _one_error_line(
        capsys,
        ["bench", path, option, name],
        f"SchemaError: {path}: {role} field {name!r} is not in split 'train'; "
        "its fields: features, labels",
    )


@pytest.mark.slow  # one case benches every format first (~9 s)
@pytest.mark.parametrize(
    "argv,contains",
    [
        (
            ["--evaluate", "no_such_module_xyz:score"],
            "no module 'no_such_module_xyz' in the working directory",
        ),
        (["--evaluate", "json:no_such_function"], "module 'json'"),
        (["--evaluate", "json"], "evaluate must be MODULE:FUNCTION"),
        (["--evaluate", ":score"], "evaluate must be MODULE:FUNCTION"),
        (["--formats", "npz,lance"], "UnknownCodecError: unknown format 'lance'"),
        (["--repeats", "0"], "repeats must be >= 1"),
        (["--sample", "-5"], "sample must be >= 1"),
        (["--resume"], "--resume continues the report of --report FILE.json"),
        (["--report", "bench.txt"], "--report must end in .json, .csv or .md"),
    ],
)
def test_other_bad_inputs_are_one_line(feats_npz, capsys, argv, contains):
    path, _, _ = feats_npz
    _one_error_line(capsys, ["bench", path, *argv], contains)


def _console_script(tmp_path) -> str:
    """A runner like the ``dstore`` console script: its own folder, not the cwd, on sys.path."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    runner = bindir / "dstore_runner.py"
    runner.write_text("import sys\nfrom dstore.cli import main\nsys.exit(main())\n")
    return str(runner)


def test_evaluate_is_imported_from_the_working_directory(feats_npz, tmp_path):
    path, _, _ = feats_npz
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_eval_mod.py").write_text(
        "import numpy as np\n\n"
        "def score(data):\n    return float(np.mean(data['test']['features'] > 0))\n"
    )
    env = dict(os.environ)
    run = [
        sys.executable,
        _console_script(tmp_path),
        "bench",
        path,
        "--formats",
        "npz",
        "--dtypes",
        "keep",
        "--repeats",
        "1",
    ]
    proc = subprocess.run(
        [*run, "--evaluate", "my_eval_mod:score"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "user evaluation on the original data" in proc.stdout
    # from any other folder the module is not found: one line, exit 2
    proc = subprocess.run(
        [*run, "--evaluate", "my_eval_mod:score"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        f"UsageError: evaluate 'my_eval_mod:score': no module 'my_eval_mod' "
        f"in the working directory {tmp_path} or on the Python path"
    )


_WITHOUT_SKLEARN = (
    "import sys\n"
    "sys.modules['sklearn'] = None  # this interpreter cannot import scikit-learn\n"
    "from dstore.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_missing_scikit_learn(feats_npz, tmp_path):
    path, feats, _ = feats_npz
    base = [sys.executable, "-c", _WITHOUT_SKLEARN, "bench"]
    for extra in ([], ["--labels", "labels"], ["--features", "features", "--labels", "labels"]):
        proc = subprocess.run(
            [*base, path, *extra], capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 2 and proc.stdout == "", proc
        assert proc.stderr.strip() == (
            "MissingDependencyError: the accuracy probe of dstore bench needs 'scikit-learn', "
            "which is not installed: pip install 'dstore-ml[bench]'"
        )
    # no probe wanted (nothing to tell labels by): scikit-learn is not needed
    plain = str(tmp_path / "plain.npz")
    np.savez(plain, emb=feats[:50])
    proc = subprocess.run(
        [*base, plain, "--formats", "npz", "--dtypes", "keep", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no accuracy probe" in proc.stdout


# ---------------------------------------------------------------- the recommendation


@pytest.mark.slow  # a bench with the probe (~5 s)
def test_no_accuracy_never_recommends_a_lossy_cast(feats_npz, tmp_path, capsys):
    _, feats, _ = feats_npz
    path = str(tmp_path / "my data.npz")  # a name that needs quoting in a shell
    np.savez(path, emb=feats)  # no labels: no accuracy can be measured
    rc = main(
        ["bench", path, "--formats", "npz,zarr", "--dtypes", "keep,float16", "--repeats", "1"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("recommendation:"))
    what, why, run = lines[at : at + 3]
    assert "no accuracy measured, lossy casts not considered" in why
    assert "float16" not in what + run and " keep" in what
    assert run.startswith(f"  run: dstore convert {shlex.quote(path)} out.")
    report = dstore.bench(path, formats=["npz", "zarr"], dtypes=["keep", "float16"], repeats=1)
    half = [c for c in report.cells if c.dtype == "float16"]
    assert all(c.error is None and c.bytes < report.recommendation.bytes for c in half)
    assert report.recommendation.bit_exact


def test_recommend_without_accuracy_picks_among_lossless_cells():
    rng = random.Random(7)
    for trial in range(300):
        cells = []
        for _i in range(rng.randint(1, 12)):
            exact = rng.random() < 0.5
            cell = Cell(
                rng.choice(["npz", "zarr", "hdf5"]),
                "keep" if exact else "float16",
                {},
                bytes=rng.randint(1, 10**6),
                raw_bytes=10**6,
                records=10,
                write_s=rng.random(),
                read_s=rng.random(),
                exact=exact,
                bit_exact=exact,
            )
            if rng.random() < 0.1:
                cell.error = "DtypePolicyError: overflow"
            cells.append(cell)
        report = BenchReport("d.npz", None, float("nan"), float("nan"), float("nan"), cells, {}, {})
        objective = rng.choice(["size", "write", "read"])
        best, reason, keep = recommend(report, objective, 0.1)
        assert not keep  # no input row: nothing to keep
        lossless = [c for c in cells if c.bit_exact and c.error is None]
        assert "no accuracy measured, lossy casts not considered" in reason, trial
        if not lossless:
            assert best is None
            continue
        key = {"size": "bytes", "write": "write_s", "read": "read_s"}[objective]
        assert best.bit_exact and best.error is None
        assert getattr(best, key) == min(getattr(c, key) for c in lossless)
        assert not math.isnan(best.write_s)


def test_peak_memory_is_the_writing_process_own(feats_npz):
    """A parent holding 400 MB does not show through, and the peak is never 0."""
    path, _, _ = feats_npz
    ballast = np.ones(400 * 2**20, dtype=np.uint8)  # touched: resident in this process
    report = dstore.bench(path, formats=["npz", "hdf5"], dtypes=["keep"], repeats=1)
    assert int(ballast[::4096].sum()) == len(ballast) // 4096
    for cell in report.cells:
        assert cell.error is None, cell.error
        assert 15 < cell.peak_write_mb < 300, (cell.label, cell.peak_write_mb)


@pytest.fixture(scope="module")
def varying_npz(tmp_path_factory, feats_npz):
    """The features plus a ragged box list and a string per record (dstore writes them)."""
    _, feats, labels = feats_npz
    rng = np.random.default_rng(7)
    n = 120
    data = {
        "train": {
            "features": feats[:n],
            "labels": labels[:n],
            "boxes": [rng.random((int(k), 4), dtype=np.float32) for k in rng.integers(0, 6, n)],
            "names": [f"tile {i} é" * int(i % 3) for i in range(n)],
        }
    }
    path = str(tmp_path_factory.mktemp("varying") / "varying.npz")
    dstore.save(data, path)
    return path


@pytest.mark.slow  # a bench over every format (~5 s)
def test_bench_measures_ragged_and_string_fields(varying_npz):
    report = dstore.bench(
        varying_npz,
        formats=["npz", "zarr", "hdf5", "tfrecord"],
        dtypes=["keep", "float16"],
        repeats=1,
    )
    assert report.task.features == "features" and report.task.labels == "labels"
    assert len(report.cells) == 8
    for cell in report.cells:
        assert cell.error is None, (cell.label, cell.error)
        if cell.dtype == "keep":  # values, offsets and strings all come back bit for bit
            assert cell.bit_exact and cell.max_abs_error == 0, cell.label
        else:  # float16 rounds the features and the box coordinates, never the offsets
            assert not cell.bit_exact and 0 < cell.max_abs_error < 1e-2, cell.label


@pytest.mark.parametrize("option,name", [("--features", "boxes"), ("--labels", "names")])
def test_probe_refuses_a_field_of_varying_size(varying_npz, capsys, option, name):
    role = option.lstrip("-")
    _one_error_line(
        capsys,
        ["bench", varying_npz, option, name],
        f"SchemaError: {varying_npz}: {role} field {name!r} of split 'train' is ",
    )
