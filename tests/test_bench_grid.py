"""The bench grid (formats x image encodings x dtype policies), its noise bands, the input's
baseline row, the probe on the stored dtype, the image probe that sees JPEG damage, and the
recommendation that does not flip on noise -- on real photo tiles and real-image features."""

from __future__ import annotations

import dataclasses
import math
import os
import random

import numpy as np
import pytest

import dstore
from dstore.bench import save_plot
from dstore.bench.accuracy import Score, Task, band_points, image_features, run_probe, to_score
from dstore.bench.grid import dtype_support, image_options, parse_dtypes, parse_images
from dstore.bench.plot import pareto
from dstore.bench.recommend import acceptable, recommend
from dstore.bench.report import to_text
from dstore.bench.results import BenchReport, Cell
from dstore.bench.scan import Comparison
from dstore.cli import main
from dstore.demo import hog_features, photo_tiles
from dstore.errors import UsageError
from dstore.registry import get_codec_class

pytest.importorskip("sklearn")
imagecodecs = pytest.importorskip("imagecodecs")


# the bench's working folders in this test's own temp dir (autouse), and the one-line
# refusal check: the same as test_bench's
from test_bench import _one_error_line, _own_tempdir  # noqa: F401  # tests/ is on sys.path

# The whole module is slow: trains the accuracy probe on every grid cell (~27 s); `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiles_npz(tmp_path_factory):
    x, y = photo_tiles(90, 64, seed=5)
    path = str(tmp_path_factory.mktemp("grid") / "tiles.npz")
    np.savez(path, x_train=x[:60], y_train=y[:60], x_test=x[60:], y_test=y[60:])
    return path


@pytest.fixture(scope="module")
def feats_npz(tmp_path_factory):
    feats, labels = hog_features(300, seed=4)
    path = str(tmp_path_factory.mktemp("grid") / "feats.npz")
    np.savez(
        path,
        features_train=feats[:200],
        labels_train=labels[:200],
        features_test=feats[200:],
        labels_test=labels[200:],
    )
    return path


# ------------------------------------------------------------------ strict parsing


@pytest.mark.parametrize(
    "images,contains",
    [
        ("gif:50", "'gif:50' is not an image encoding"),
        ("jpeg", "give a quality 1..100"),
        ("jpeg:0", "give a quality 1..100"),
        ("jpeg:101", "give a quality 1..100"),
        ("webp:high", "give a quality 1..100"),
        ("png:11", "png takes a level, not a quality"),
        ("png:best", "png takes a level, not a quality"),
        ("png,jpeg:90,jpeg:90", "'jpeg:90' is given twice"),
        (",", "give at least one image encoding"),
    ],
)
def test_bad_images_are_one_line(tiles_npz, capsys, images, contains):
    _one_error_line(capsys, ["bench", tiles_npz, "--images", images], "UsageError: --images: ")
    _one_error_line(capsys, ["bench", tiles_npz, "--images", images], contains)


def test_grid_vocabulary_parses_every_valid_value():
    for q in range(1, 101):
        for name in ("jpeg", "webp", "jxl"):
            (enc,) = parse_images([f"{name}:{q}"])
            assert (enc.name, enc.quality, str(enc)) == (name, q, f"{name}:{q}")
    for n in range(0, 24):  # float32 keeps 0..23 explicit mantissa bits
        assert parse_dtypes([f"round:{n}"]) == [f"round:{n}"]
    for bad in ("round:24", "float8", "int16", "x=float8"):
        with pytest.raises(UsageError, match="--dtypes"):
            parse_dtypes([bad])
    with pytest.raises(UsageError, match="given twice"):
        parse_dtypes(["keep", "keep"])
    # what this dstore applies is supported; known but unimplemented policies say so
    for spec in ("keep", "float16", "float32", "features=float16"):
        assert dtype_support(spec) is None
    for spec in ("bfloat16", "round:10", "int8", "uint8"):
        why = dtype_support(spec)
        try:
            dstore.engine.dtypes.parse_policy(spec)
        except dstore.errors.DstoreError:
            assert why == f"dtype policy {spec!r} is not in this dstore"
        else:
            assert why is None


def _declares(fmt: str, key: str) -> bool:
    cls = get_codec_class(fmt)
    names = {f.name for f in dataclasses.fields(cls.Options)}
    return key in names and "quality" in names


def test_image_options_follow_what_each_codec_declares():
    (jpeg,) = parse_images(["jpeg:80"])
    for fmt, key in (("tfrecord", "image_codec"), ("zarr", "image_codec"), ("npz", None)):
        got = image_options(get_codec_class(fmt), fmt, jpeg)
        if key is not None and _declares(fmt, key):
            assert got == {key: "jpeg", "quality": 80}
        else:
            assert isinstance(got, str) and got.startswith(f"{fmt} has no -o ")
            assert "\n" not in got
    assert image_options(get_codec_class("npz"), "npz", parse_images(["png"])[0]) == {}


def test_png_levels_are_every_level_the_formats_take(tiles_npz, tmp_path):
    """``--images png:LEVEL`` takes each ``png_level`` a format takes (balanced and small
    were refused while bench kept a list of its own), and the cell writes at that level."""
    from dstore.images.options import NAMED_PNG_LEVELS

    for level in (*NAMED_PNG_LEVELS, "0", "9"):
        (enc,) = parse_images([f"png:{level}"])
        assert image_options(get_codec_class("tfrecord"), "tfrecord", enc) == {"png_level": level}
    with pytest.raises(UsageError, match="png:balanced"):
        parse_images(["png:90"])
    report = dstore.bench(
        tiles_npz, formats=["tfrecord"], images=["png:small"], dtypes=["keep"], probe=False
    )
    (cell,) = report.cells
    assert cell.error is None and cell.exact and cell.stored == "PNG small", cell


# ---------------------------------------------------------------- the grid on tiles


def test_grid_on_photo_tiles_measures_only_choices_that_differ(tiles_npz, capsys):
    """Tiles hold no float: a dtype policy would repeat keep's cell, so none is measured (one
    line says so); the image choices are measured where the format has them (npz has no
    lossy image codec: one line), and the images column says what is stored."""
    rc = main(
        [
            "bench",
            tiles_npz,
            "--formats",
            "npz,tfrecord",
            "--images",
            "png,jpeg:90",
            "--dtypes",
            "keep,float16,bfloat16",
            "--repeats",
            "1",
            "--wide",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "dtypes not measured: float16, bfloat16: no field is floating" in out
    assert "images jpeg:90 not measured on npz: the format cannot store it" in out
    report = dstore.bench(
        tiles_npz,
        formats=["npz", "tfrecord"],
        images=["png", "jpeg:90"],
        dtypes=["keep", "float16", "bfloat16"],
        repeats=1,
    )
    got = [(c.format, c.images, c.dtype, c.stored) for c in report.cells]
    assert got == [
        ("npz", "png", "keep", "raw + deflate 6"),
        ("tfrecord", "png", "keep", "PNG"),
        ("tfrecord", "jpeg:90", "keep", "JPEG q90"),
    ]
    assert report.input.bytes == os.path.getsize(tiles_npz) and report.input.bit_exact
    assert report.input.accuracy == report.baseline_accuracy
    for cell in report.cells:
        assert cell.error is None and cell.unsupported is None, cell.error
        if cell.images == "png":  # PNG or raw: lossless, the same accuracy to the last example
            assert cell.exact and cell.bit_exact and cell.max_abs_error == 0
            assert cell.accuracy == report.baseline_accuracy and cell.probe_reused
            assert cell.band == 0 and cell.within_noise
        else:  # exact and max err agree: JPEG changes pixels, by a measured amount
            assert not cell.exact and cell.max_abs_error > 0 and not cell.probe_reused
    lines = out.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("format"))
    rows = lines[header + 1 : header + 1 + 4]
    assert rows[0].startswith("input (npz)") and "your input as it is" in rows[0]
    assert [r.split()[0] for r in rows[1:]] == ["npz", "tfrecord", "tfrecord"]
    assert "raw + deflate 6" in rows[1] and "PNG" in rows[2] and "JPEG q90" in rows[3]
    # a lossy image cell is recommended only within the bound or the noise (png rows are exact)
    best = report.recommendation
    assert best is not None and (report.keep_input or acceptable(best, 0.1))


def test_image_probe_sees_heavy_jpeg_and_not_light():
    """Trained and tested on JPEG-damaged tiles: q20 costs accuracy beyond the noise band,
    q95 stays within it; the original is far above chance (7 photos: 14%)."""
    x, y = photo_tiles(600, 64, seed=1)
    cut = 400
    task = Task("train", "test", "x", "y")

    def data(xx: np.ndarray) -> dict:
        return {"train": {"x": xx[:cut], "y": y[:cut]}, "test": {"x": xx[cut:], "y": y[cut:]}}

    def jpeg(q: int) -> np.ndarray:
        return np.stack([imagecodecs.jpeg8_decode(imagecodecs.jpeg8_encode(t, level=q)) for t in x])

    base = run_probe(data(x), task)
    assert base.accuracy > 0.8 and base.dtype == "float32"
    heavy, light = run_probe(data(jpeg(20)), task), run_probe(data(jpeg(95)), task)
    d_heavy = 100 * (heavy.accuracy - base.accuracy)
    d_light = 100 * (light.accuracy - base.accuracy)
    assert d_heavy < -band_points(base.score, heavy.score) < 0, d_heavy
    assert abs(d_light) <= band_points(base.score, light.score), d_light
    # the damage is in the texture features: JPEG q20 moves them, q95 hardly
    f0, f20, f95 = (image_features(a[:50]) for a in (x, jpeg(20), jpeg(95)))
    assert np.abs(f20 - f0).mean() > 3 * np.abs(f95 - f0).mean()


# ------------------------------------------------------- the probe on the stored dtype


def test_probe_trains_on_the_stored_dtype(feats_npz, tmp_path):
    report = dstore.bench(feats_npz, formats=["npz"], dtypes=["keep", "float16"], repeats=1)
    by = {c.dtype: c for c in report.cells}
    assert report.probe_dtype == "float32" and by["keep"].probe_dtype == "float32"
    assert by["float16"].probe_dtype == "float32"  # widened for scikit-learn, not to float64
    assert by["keep"].probe_s > 0 and "trained as" in to_text(report, wide=True)
    wide = str(tmp_path / "f64.npz")
    with np.load(feats_npz) as z:
        np.savez(wide, **{k: (z[k].astype(np.float64) if "features" in k else z[k]) for k in z})
    report = dstore.bench(wide, formats=["npz"], dtypes=["keep", "float32"], repeats=1)
    assert report.probe_dtype == "float64"
    assert {c.dtype: c.probe_dtype for c in report.cells} == {
        "keep": "float64",
        "float32": "float32",
    }


# --------------------------------------------------------------- evaluate's noise band


def _evaluate_variants():
    def correctness(data):
        x_tr, y_tr = data["train"]["features"], data["train"]["labels"]
        x_te, y_te = data["test"]["features"], data["test"]["labels"]
        centroids = np.stack([x_tr[y_tr == c].mean(axis=0) for c in np.unique(y_tr)])
        pred = np.unique(y_tr)[
            ((x_te[:, None, :].astype(np.float64) - centroids[None]) ** 2).sum(-1).argmin(1)
        ]
        return pred == y_te

    def pair(data):
        c = correctness(data)
        return float(c.mean()), len(c)

    def bare(data):
        return float(correctness(data).mean())

    return correctness, pair, bare


def test_evaluate_returns_give_a_band_or_say_they_cannot(feats_npz):
    correctness, pair, bare = _evaluate_variants()
    reports = {
        f.__name__: dstore.bench(
            feats_npz, formats=["npz"], dtypes=["keep", "float16"], evaluate=f, repeats=1
        )
        for f in (correctness, pair, bare)
    }
    for name, report in reports.items():
        by = {c.dtype: c for c in report.cells}
        assert by["keep"].accuracy == report.baseline_accuracy and by["keep"].bit_exact
        text = to_text(report)
        if name == "bare":
            assert math.isnan(by["float16"].band) and by["float16"].within_noise is None
            assert "cannot be judged" in text
            assert report.recommendation.dtype == "keep"  # a lossy cell is never chosen blind
        else:
            assert by["float16"].band >= 0 and by["float16"].within_noise is not None
            assert "cannot be judged" not in text
    n = len(np.load(feats_npz)["labels_test"])
    p = reports["pair"].baseline_accuracy
    assert reports["pair"].noise_points == pytest.approx(200 * math.sqrt(p * (1 - p) / n))


@pytest.mark.parametrize(
    "result,contains",
    [
        ("good", "returned str"),
        ((0.5, 0), "(score, n) needs"),
        ((1.5, 10), "(score, n) needs"),
        (np.array([0.5, 1.0]), "returned ndarray"),
        (np.zeros((2, 2)), "returned ndarray"),
        (True, "returned True"),
    ],
)
def test_bad_evaluate_results_are_one_line(result, contains):
    with pytest.raises(UsageError, match=r"^my_eval returned") as e:
        to_score(result, "my_eval")
    assert contains in str(e.value) and "\n" not in str(e.value)


def test_band_points_paired_and_binomial():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 300))
        a = (rng.random(n) < rng.random()).astype(float)
        flip = rng.random(n) < rng.random() * 0.3
        b = np.where(flip, 1 - a, a)
        band = band_points(Score(a.mean(), n, a), Score(b.mean(), n, b))
        d = b - a
        assert band == pytest.approx(200 * d.std(ddof=1) / math.sqrt(n))
        if not flip.any():
            assert band == 0  # identical predictions: no noise in the difference
        unpaired = band_points(Score(a.mean(), n), Score(b.mean(), n))
        assert unpaired == pytest.approx(
            200 * math.sqrt((a.mean() * (1 - a.mean()) + b.mean() * (1 - b.mean())) / n)
        )
    assert math.isnan(band_points(Score(0.5), Score(0.6)))


# ----------------------------------------------------------- recommendation and plot


def _random_report(rng: random.Random, banded: bool) -> BenchReport:
    cells = []
    for _ in range(rng.randint(1, 12)):
        exact = rng.random() < 0.3
        delta = 0.0 if exact else rng.uniform(-5, 1)
        band = 0.0 if exact else (rng.uniform(0, 3) if banded else float("nan"))
        cell = Cell(
            rng.choice(["npz", "zarr", "tfrecord"]),
            "keep" if exact else rng.choice(["float16", "int8"]),
            {},
            images=rng.choice(["png", "jpeg:90"]) if not exact else "png",
            bytes=rng.randint(1, 10**6),
            raw_bytes=10**6,
            records=10,
            write_s=rng.random(),
            read_s=rng.random(),
            exact=exact,
            bit_exact=exact,
            accuracy=0.9 + delta / 100,
            accuracy_delta=delta,
            band=band,
            within_noise=None if math.isnan(band) else abs(delta) <= band,
        )
        if rng.random() < 0.1:
            cell.unsupported = "dtype policy 'int8' is not in this dstore"
            cell.bytes = 0
        cells.append(cell)
    return BenchReport("d.npz", None, 0.9, 1.0, 2.0, cells, {}, {})


def test_recommendation_never_flips_on_noise():
    rng = random.Random(11)
    for trial in range(400):
        banded = rng.random() < 0.7
        report = _random_report(rng, banded)
        objective = rng.choice(["size", "write", "read"])
        max_drop = rng.choice([0.1, 1.0, 3.0])
        best, reason, keep = recommend(report, objective, max_drop)
        assert not keep  # no input row: nothing to keep
        ok = [c for c in report.cells if c.unsupported is None and acceptable(c, max_drop)]
        for c in ok:  # acceptable: exact, or a judged drop within the bound or the noise
            assert c.bit_exact or (
                c.within_noise is not None and (c.accuracy_delta >= -max_drop or c.within_noise)
            )
        if not ok:
            assert best is None and "no configuration met" in reason
            continue
        key = {"size": "bytes", "write": "write_s", "read": "read_s"}[objective]
        assert getattr(best, key) == min(getattr(c, key) for c in ok), trial
        if not banded:
            assert best.bit_exact  # no band: a lossy difference cannot be judged
        # moving a lossy cell's delta within its band never changes whether it may be chosen
        for c in report.cells:
            if c.within_noise and not c.bit_exact:
                before = acceptable(c, max_drop)
                c.accuracy_delta = rng.uniform(-c.band, c.band)
                assert acceptable(c, max_drop) == before


def test_pareto_front_and_plot(tmp_path):
    rng = random.Random(3)
    for _ in range(200):
        report = _random_report(rng, True)
        cells = [c for c in report.cells if c.measured]
        front = pareto(cells, "accuracy", higher_better=True)
        for c in cells:
            dominated = any(
                o.bytes <= c.bytes
                and o.accuracy >= c.accuracy
                and (o.bytes < c.bytes or o.accuracy > c.accuracy)
                for o in cells
            )
            assert (c in front) != dominated
    report.input = Cell("npz", "as is", {}, bytes=2 * 10**6, is_input=True, accuracy=0.9)
    out = str(tmp_path / "p.png")
    save_plot(report, out)
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------ the pyspacer evaluator


def test_pyspacer_example_evaluator_gets_a_band(feats_npz, capsys):
    from dstore.bench.examples import pyspacer

    with np.load(feats_npz) as z:
        data = {
            "train": {"features": z["features_train"], "labels": z["labels_train"]},
            "test": {"features": z["features_test"], "labels": z["labels_test"]},
        }
    correct = pyspacer.evaluate(data)
    assert correct.dtype == bool and correct.shape == data["test"]["labels"].shape
    assert correct.mean() > 2 / 7  # well above chance (7 photographs: 1/7)
    for dtype, trained in (
        (np.float16, np.float32),
        (np.float32, np.float32),
        (np.float64, np.float64),
    ):
        x, _ = pyspacer._xy(
            {"features": data["train"]["features"].astype(dtype), "labels": data["train"]["labels"]}
        )
        assert x.dtype == trained  # the stored dtype, widened only where scikit-learn must
    rc = main(
        [
            "bench",
            feats_npz,
            "--formats",
            "npz",
            "--dtypes",
            "float32,float16",
            "--repeats",
            "1",
            "--evaluate",
            "dstore.bench.examples.pyspacer:evaluate",
        ]
    )
    out = capsys.readouterr().out
    assert (
        rc == 0
        and "user evaluation on the original data" in out
        and "+/-: the noise of delta" in out
    )
    assert "cannot be judged" not in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("recommendation:")]
    assert "npz" in line


def _compare(a: np.ndarray, b: np.ndarray) -> Comparison:
    comp = Comparison()
    for i in range(0, len(a), 16):  # batch by batch, as the scan compares
        comp.add("field 'x'", a[i : i + 16], b[i : i + 16])
    return comp


def test_pixel_error_is_measured():
    """A JPEG'd tile field reports its pixel error (not 0), batch by batch; exact and max
    err agree; a widened dtype holding the same values is exact but not bit-exact; a NaN
    where a number was is an infinite error."""
    x, _ = photo_tiles(40, 64, seed=2)
    for q in (20, 95):
        j = np.stack([imagecodecs.jpeg8_decode(imagecodecs.jpeg8_encode(t, level=q)) for t in x])
        comp = _compare(x, j)
        want = np.abs(x.astype(np.int16) - j.astype(np.int16)).max()
        assert not comp.exact and not comp.bit_exact and comp.max_abs == want > 0
    same = _compare(x, x.copy())
    assert (same.max_abs, same.max_rel, same.exact, same.bit_exact) == (0.0, 0.0, True, True)
    wide = _compare(x, x.astype(np.uint16))
    assert wide.exact and not wide.bit_exact and wide.max_abs == 0
    f = np.linspace(0, 1, 64, dtype=np.float32).reshape(4, 16)
    g = f.copy()
    g[2, 3] = np.nan
    assert _compare(f, g).max_abs == math.inf and not _compare(f, g).exact


def test_string_fields_ride_along(feats_npz, tmp_path):
    """A dataset with a string field (as JSON sources give: file names) benches like any other:
    lossless cells are bit-exact, the input row is first, nothing is taken for an image."""
    with np.load(feats_npz) as z:
        n = len(z["features_train"])
        path = str(tmp_path / "named.npz")
        np.savez(
            path,
            features=z["features_train"],
            labels=z["labels_train"],
            source=np.array([f"img-{i // 30:04d}.json" for i in range(n)]),
        )
    report = dstore.bench(path, formats=["npz", "zarr"], dtypes=["keep", "float16"], repeats=1)
    by = {(c.format, c.dtype): c for c in report.cells}
    for fmt in ("npz", "zarr"):
        assert by[fmt, "keep"].error is None, by[fmt, "keep"].error
        assert by[fmt, "keep"].bit_exact and by[fmt, "keep"].images == "-"
        assert by[fmt, "keep"].accuracy == report.baseline_accuracy
        assert not by[fmt, "float16"].bit_exact and by[fmt, "float16"].max_abs_error > 0
    assert report.input.label == "input (npz)"
