"""dstore bench --read torch|tf: each cell's training loader measured with real DataLoader
workers (or tf.data), shown in the table and report, and used by --goal read/balanced."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

import dstore
from dstore.bench.recommend import recommend
from dstore.bench.results import BenchReport, Cell
from dstore.bench.shuffle import permutation_quality
from dstore.cli import main

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiles_npz(tmp_path_factory, tiles):
    x, y = tiles
    path = str(tmp_path_factory.mktemp("benchread") / "tiles.npz")
    np.savez(path, x_train=x[:48], y_train=y[:48], x_test=x[48:60], y_test=y[48:60])
    return path


def test_bench_measures_the_torch_loader_of_every_cell(tiles_npz):
    report = dstore.bench(
        tiles_npz,
        formats=["npz", "zarr"],
        dtypes=["keep"],
        probe=False,
        repeats=1,
        loader="torch",
        loader_workers=1,
    )
    cells = [report.input, *report.cells]
    for cell in cells:
        assert cell.error is None, cell.error
        assert cell.loader_rps > 0 and cell.loader_mbps > 0, cell.label
        # the cold pass ran after a page-cache drop (posix_fadvise on Linux)
        assert cell.loader_cold_rps > 0, cell.label
        # MB/s is the cell's bytes over the same time as records/s
        records = 60
        assert cell.loader_mbps == pytest.approx(
            cell.bytes / (records / cell.loader_rps) / 1e6, rel=1e-6
        )
    assert report.settings["loader"] == "torch"
    by = {c.format: c for c in report.cells}
    # zarr reads any record: the shuffled loader runs, and its order is about as shuffled
    # as a uniform permutation of the 48 train records (MosaicML's measure: 3.4), where
    # storage order (one worker) is not shuffled at all
    perm = permutation_quality(48)
    assert by["zarr"].permutation_quality == pytest.approx(perm) and 3.2 < perm < 3.7
    assert by["zarr"].shuffled_rps > 0 and by["zarr"].shuffle_quality > 0.85 * perm
    assert by["zarr"].ordered_quality == 0.0
    # a deflated npz shuffles through the stored copy the reader makes of it: measured too
    assert by["npz"].shuffled_rps > 0 and by["npz"].shuffle_quality > 0.85 * perm
    assert not by["npz"].shuffle_note
    assert report.input.shuffled_rps > 0  # the input (an uncompressed npz) reads any record


def test_cli_read_torch_goal_read(tiles_npz, tmp_path, capsys):
    report_path = tmp_path / "r.json"
    rc = main(
        [
            "bench",
            tiles_npz,
            "--formats",
            "zarr,tfrecord",
            "--dtypes",
            "keep",
            "--no-probe",
            "--repeats",
            "1",
            "--read",
            "torch",
            "--workers",
            "1",
            "--goal",
            "read",
            "--report",
            str(report_path),
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0
    assert "rec/s" in captured.out and "shuf rec/s" in captured.out  # the loader columns
    assert "records/s" in captured.err  # each cell's progress line
    lines = captured.out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("recommendation:"))
    saved = json.loads(report_path.read_text())
    cells = [c for c in saved["cells"] if c["exact"]]  # no probe: lossless cells only
    best = max(cells, key=lambda c: c["loader_rps"])
    inp = saved["input"]["loader_rps"]
    if saved["keep_input"]:  # no cell's loader beat the input's by the noise (10%)
        assert best["loader_rps"] < inp / 0.9 and "keep your input" in lines[at]
    else:  # ranked by the loader, not the plain read
        assert lines[at].startswith(f"recommendation: {best['format']} {best['images']}")
        assert "fastest to read" in lines[at + 1]


def test_the_report_holds_ordered_and_shuffled_loader_figures(tiles_npz, tmp_path, capsys):
    """What ``--read`` writes in the JSON and Markdown reports: each format's records/s in
    storage order and shuffled, and the shuffled order's quality on MosaicML's scale."""
    json_path, md_path = tmp_path / "r.json", tmp_path / "r.md"
    args = ["bench", tiles_npz, "--formats", "zarr,tfrecord", "--dtypes", "keep"]
    args += ["--no-probe", "--repeats", "1", "--read", "torch", "--workers", "2"]
    assert main([*args, "--report", str(json_path)]) == 0
    capsys.readouterr()
    saved = json.loads(json_path.read_text())
    assert saved["settings"]["loader"] == "torch" and saved["settings"]["loader_workers"] == 2
    perm = permutation_quality(48)  # the train split, the largest, is the one checked
    for cell in saved["cells"]:
        assert cell["loader_rps"] > 0 and cell["shuffled_rps"] > 0, cell["format"]
        assert cell["permutation_quality"] == pytest.approx(perm)
        assert cell["shuffle_quality"] > 0.85 * perm, cell["format"]
        # two workers each read a contiguous part: a few long steps between the parts
        assert 0 <= cell["ordered_quality"] < 0.3 * perm, cell["format"]
    assert saved["input"]["loader_rps"] > 0 and saved["input"]["shuffled_rps"] > 0
    assert main([*args, "--report", str(md_path)]) == 0
    md = md_path.read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| format"))
    assert "| loader rec/s | shuffled rec/s | shuffle quality |" in head
    assert "MosaicML's shuffle quality" in md
    assert f"a uniform random permutation of as many records: {perm:.2f}" in md
    for fmt in ("zarr", "tfrecord"):
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {fmt} |"))
        cells = [c.strip() for c in row.split("|")]
        loader, shuffled, quality = cells[cols(head, "loader rec/s") : cols(head, "loader MB/s")]
        assert float(loader.replace(",", "")) > 0 and float(shuffled.replace(",", "")) > 0
        assert float(quality) > 0.85 * perm


def cols(head: str, name: str) -> int:
    return [c.strip() for c in head.split("|")].index(name)


def test_an_input_without_random_access_says_why_it_has_no_shuffle(tiles_npz, tmp_path, capsys):
    """A GZIP TFRecord reads in order only: the input's shuffled figure is left out with the
    reason in one line, and the run goes on."""
    src = str(tmp_path / "gz.tfrecords")
    dstore.convert(tiles_npz, src, options={"compression": "gzip"})
    json_path = tmp_path / "r.json"
    args = ["bench", src, "--formats", "zarr", "--dtypes", "keep", "--no-probe"]
    args += ["--repeats", "1", "--read", "torch", "--workers", "1", "--report", str(json_path)]
    assert main(args) == 0
    captured = capsys.readouterr()
    saved = json.loads(json_path.read_text())
    note = saved["input"]["shuffle_note"]
    assert saved["input"]["loader_rps"] > 0 and saved["input"]["shuffled_rps"] is None
    assert "\n" not in note and note.startswith(f"{src}: shuffle='global' needs random access")
    assert "no shuffled read" in captured.err  # the input's progress line
    assert f"baseline; no shuffle: {src}: shuffle='global'" in " ".join(captured.out.split())
    assert saved["cells"][0]["shuffled_rps"] > 0  # the zarr cell shuffles


def test_the_loader_columns_exist_only_with_read(tiles_npz, capsys):
    assert main(["bench", tiles_npz, "--formats", "zarr", "--dtypes", "keep", "--no-probe"]) == 0
    assert "rec/s" not in capsys.readouterr().out


def test_bad_read_value_is_one_line(tiles_npz, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", tiles_npz, "--read", "jax"])
    assert e.value.code == 2
    assert "invalid choice: 'jax'" in capsys.readouterr().err


def _cell(rng: random.Random, loader: bool) -> Cell:
    cell = Cell(
        rng.choice(["npz", "zarr", "tfrecord"]),
        "keep",
        {},
        bytes=rng.randint(1, 10**6),
        raw_bytes=10**6,
        records=100,
        write_s=rng.uniform(0.01, 1),
        read_s=rng.uniform(0.01, 1),
        exact=True,
        bit_exact=True,
    )
    if loader:
        cell.loader_rps = rng.uniform(10, 1000)
    return cell


def test_goal_read_ranks_by_the_loader_and_balanced_by_all_three():
    rng = random.Random(3)
    for trial in range(200):
        loader = rng.random() < 0.5
        cells = [_cell(rng, loader) for _ in range(rng.randint(1, 8))]
        settings = {"loader": "torch" if loader else None}
        report = BenchReport("d.npz", None, math.nan, math.nan, math.nan, cells, {}, settings)
        best, _, _ = recommend(report, "read", 0.1)
        if loader:
            assert best.loader_rps == max(c.loader_rps for c in cells), trial
        else:
            assert best.read_s == min(c.read_s for c in cells), trial
        best, reason, _ = recommend(report, "balanced", 0.1)
        assert "best balance" in reason

        def score(c: Cell, cells=cells, loader=loader) -> float:
            read = 1 / c.loader_rps if loader else c.read_s / c.records
            floor_read = min(1 / d.loader_rps if loader else d.read_s / d.records for d in cells)
            return (
                c.bytes
                / min(d.bytes for d in cells)
                * c.write_s
                / min(d.write_s for d in cells)
                * read
                / floor_read
            )

        assert score(best) == pytest.approx(min(score(c) for c in cells)), trial
        # a cell that is best at all three wins the balance
        star = Cell("zarr", "keep", {}, bytes=1, raw_bytes=10**6, records=100, exact=True)
        star.write_s, star.read_s, star.loader_rps = 0.001, 0.001, 10**6
        report.cells = [*cells, star]
        assert recommend(report, "balanced", 0.1)[0] is star
