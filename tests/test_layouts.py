"""Training layouts (``--layout``): label-maker arrays to TensorFlow's feature names and back.

Real photo tiles (``dstore.demo.photo_tiles``) with label-maker's labels; the
TFRecord output is read back by dstore here and by TensorFlow in
``test_layouts_tf.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dstore
from dstore.cli import main
from dstore.codecs.example.wire import decode_example
from dstore.demo import photo_tiles
from dstore.errors import SchemaError, UsageError
from dstore.layouts import get_layout_class, layout_names, register_layout
from dstore.layouts.label_maker import ObjectDetection
from dstore.model import Tensor
from dstore.model.schema import FieldSpec, SplitSpec


def od_labels(rng: np.random.Generator, n: int, size: int, most: int, pad: int = 0) -> np.ndarray:
    """label-maker object-detection y: (n, most + pad, 5) uint8 [xmin, ymin, xmax, ymax, class]
    in pixels inside the tile, classes from 1, zero rows after each record's boxes."""
    y = np.zeros((n, most + pad, 5), np.uint8)
    for i in range(n):
        for j in range(int(rng.integers(0, most + 1))):
            x0, y0 = rng.integers(0, size - 1, 2)
            x1 = rng.integers(x0 + 1, size + 1)
            y1 = rng.integers(y0 + 1, size + 1)
            y[i, j] = [x0, y0, min(x1, 255), min(y1, 255), rng.integers(1, 3)]
    return y


def write_od_npz(path: str, seed: int = 0, size: int = 64, most: int = 6) -> dict[str, np.ndarray]:
    """A label-maker OD data.npz; the test split is padded past its own largest box count,
    as label-maker pads every split to the largest count over all tiles."""
    rng = np.random.default_rng(seed)
    x, _ = photo_tiles(40, size, seed=seed)
    arrays = {
        "x_train": x[:28],
        "y_train": od_labels(rng, 28, size, most),
        "x_test": x[28:],
        "y_test": od_labels(rng, 12, size, max(most - 2, 0), pad=2),
    }
    np.savez(path, **arrays)
    return arrays


@pytest.fixture
def od_npz(tmp_path) -> tuple[str, dict[str, np.ndarray]]:
    path = str(tmp_path / "data.npz")
    return path, write_od_npz(path)


def _records(path: str, split: str = "train") -> list[dict]:
    """Every Example of a split as {feature: (kind, values)}, parsed by dstore's decoder."""
    from dstore.codecs.tfrecord.io import RecordFile

    out = []
    for name in sorted(os.listdir(path)):
        if name.startswith(f"{split}-") and name.endswith(".tfrecord"):
            with RecordFile(os.path.join(path, name)) as f:
                out += [decode_example(rec) for rec in f]
    return out


# ---------------------------------------------------------------- object detection


def test_od_round_trip_is_exact_over_many_datasets(tmp_path):
    """npz -> TFRecord -> npz gives label-maker's arrays back bit for bit (keys, padding)."""
    for seed, size, most in [(0, 64, 6), (1, 32, 1), (2, 48, 12), (3, 256, 4), (4, 40, 0)]:
        src = str(tmp_path / f"d{seed}.npz")
        arrays = write_od_npz(src, seed, size, most)
        mid, back = str(tmp_path / f"d{seed}.tfrecords"), str(tmp_path / f"b{seed}.npz")
        dstore.convert(src, mid, layout="tf-object-detection", options={"class_names": "a,b"})
        dstore.convert(mid, back, layout="tf-object-detection")
        assert dstore.verify(src, back).ok
        with np.load(back) as got:
            assert sorted(got.files) == sorted(arrays)
            for key, want in arrays.items():
                assert got[key].dtype == want.dtype and got[key].shape == want.shape, key
                np.testing.assert_array_equal(got[key], want, err_msg=key)


def test_od_over_many_shards(tmp_path, od_npz):
    """Shards much smaller than a batch: the ragged box fields are cut between shards
    mid-batch (records, not values), and come back exactly."""
    src, _ = od_npz
    out, back = str(tmp_path / "od.tfrecords"), str(tmp_path / "b.npz")
    dstore.convert(
        src,
        out,
        layout="tf-object-detection",
        options={"shard_mb": "0.02", "class_names": "a,b"},
    )
    assert (
        len([f for f in os.listdir(out) if f.startswith("train-") and f.endswith(".tfrecord")]) > 3
    )
    dstore.convert(out, back, layout="tf-object-detection")
    assert dstore.verify(src, back).ok


def test_od_feature_values(tmp_path, od_npz):
    src, arrays = od_npz
    out = str(tmp_path / "od.tfrecords")
    report = dstore.convert(
        src, out, layout="tf-object-detection", options={"class_names": "building,road"}
    )
    assert report.notes == []  # every box inside its tile: nothing clipped
    recs = _records(out)
    y = arrays["y_train"]
    assert len(recs) == len(y)
    for i, rec in enumerate(recs):
        boxes = y[i][y[i].any(axis=1)]
        assert rec["image/format"][1] == [b"png"]
        assert rec["image/height"][1].tolist() == [64] and rec["image/width"][1].tolist() == [64]
        assert rec["image/filename"][1] == [str(i).encode()] == rec["image/source_id"][1]
        for k, c in enumerate(("xmin", "ymin", "xmax", "ymax")):
            got = rec[f"image/object/bbox/{c}"][1]
            np.testing.assert_array_equal(got, (boxes[:, k] / 64).astype(np.float32))
        assert rec["image/object/class/label"][1].tolist() == boxes[:, 4].tolist()
        names = [[b"building", b"road"][c - 1] for c in boxes[:, 4]]
        assert rec.get("image/object/class/text", (1, []))[1] == names


def test_od_box_outside_the_tile_is_clipped_and_counted(tmp_path, capsys):
    rng = np.random.default_rng(5)
    x, _ = photo_tiles(6, 32, seed=5)
    y = od_labels(rng, 6, 32, 3)
    y[1, 0] = [20, 5, 200, 31, 1]  # xmax past the 32-px tile
    y[4, 1] = [40, 40, 60, 90, 2]  # wholly outside
    src, out = str(tmp_path / "d.npz"), str(tmp_path / "o.tfrecords")
    np.savez(src, x_train=x, y_train=y)
    assert main(["convert", src, out, "--layout", "tf-object-detection"]) == 0
    text = capsys.readouterr().out
    assert "2 box(es) in 2 record(s) reached outside their tile and were clipped" in text
    recs = _records(out)
    assert recs[1]["image/object/bbox/xmax"][1][0] == 1.0
    assert recs[4]["image/object/bbox/xmin"][1][1] == 1.0
    assert recs[4]["image/object/bbox/ymax"][1][1] == 1.0
    for rec in recs:
        for c in ("xmin", "ymin", "xmax", "ymax"):
            v = rec[f"image/object/bbox/{c}"][1]
            assert ((v >= 0) & (v <= 1)).all()


def test_od_pixels_come_back_exactly_from_the_normalised_floats():
    """Every pixel coordinate 0..W of tiles 1..1200 px wide: float32(p / W) * W rounds to p."""
    layout = ObjectDetection()
    for size in [*range(1, 300), 511, 512, 640, 1000, 1023, 1024, 1200]:
        coords = np.arange(size + 1)
        n = len(coords)
        x = np.zeros((n, 1, size, 1), np.uint8)  # tiles one pixel high: only the width matters
        h = 1
        y = np.zeros((n, 1, 5), np.uint16)
        y[:, 0] = np.stack([coords, np.zeros(n), coords, np.full(n, h), np.ones(n)], 1)
        split = SplitSpec(
            "train",
            n,
            {
                "x": FieldSpec("x", Tensor(x.dtype, x.shape[1:])),
                "y": FieldSpec("y", Tensor(y.dtype, (1, 5))),
            },
        )
        encoded, saved = layout.encode_split(split, "t")
        batch = layout.encode_batch("train", {"x": x, "y": y}, 0, "t")
        decoded_spec = layout.decode_split(encoded, saved, "t", None)  # type: ignore[arg-type]
        back = layout.decode_batch("train", batch, 0, "t")
        assert decoded_spec.fields["y"].kind == Tensor(np.dtype(np.uint16), (1, 5))
        np.testing.assert_array_equal(back["y"], y, err_msg=f"tile width {size}")


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 300),
    height=st.integers(1, 300),
    most=st.integers(0, 8),
    n=st.integers(0, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_od_mapping_round_trips_any_labels_inside_the_tile(size, height, most, n, seed):
    """Any label-maker y whose boxes lie in the tile (any padding, classes, degenerate boxes)
    comes back bit for bit from the layout's fields."""
    rng = np.random.default_rng(seed)
    layout = ObjectDetection(class_names="a,b,c")
    y = np.zeros((n, most, 5), np.uint16)
    for i in range(n):
        k = int(rng.integers(0, most + 1))
        y[i, :k, 0:4:2] = rng.integers(0, size + 1, (k, 2))  # x: 0..width
        y[i, :k, 1:4:2] = rng.integers(0, height + 1, (k, 2))  # y: 0..height
        y[i, :k, 4] = rng.integers(1, 4, k)
    x = np.zeros((n, height, size), np.uint8)  # 2-d tiles
    split = SplitSpec(
        "s",
        n,
        {
            "x": FieldSpec("x", Tensor(x.dtype, x.shape[1:])),
            "y": FieldSpec("y", Tensor(y.dtype, y.shape[1:])),
        },
    )
    encoded, saved = layout.encode_split(split, "t")
    batch = layout.encode_batch("s", {"x": x, "y": y}, 0, "t")
    assert layout.notes() == []
    layout.decode_split(encoded, saved, "t", None)  # type: ignore[arg-type]
    back = layout.decode_batch("s", batch, 0, "t")
    np.testing.assert_array_equal(back["y"], y)
    assert back["y"].dtype == y.dtype


def test_od_class_index_without_a_name_is_one_error(tmp_path, capsys):
    rng = np.random.default_rng(2)
    x, _ = photo_tiles(8, 32, seed=2)
    y = od_labels(rng, 8, 32, 3)
    y[5, 0] = [1, 1, 9, 9, 3]  # class 3, two names given
    src, out = str(tmp_path / "d.npz"), str(tmp_path / "o.tfrecords")
    np.savez(src, x_train=x, y_train=y)
    code = main(["convert", src, out, "--layout", "tf-object-detection", "-o", "class_names=a,b"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "split 'train'" in err and "field 'y'" in err and "record 5" in err
    assert "class index 3 has no name" in err and src in err
    assert not os.path.exists(out) and os.listdir(tmp_path) == ["d.npz"]


@pytest.mark.parametrize(
    ("layout", "y", "needs"),
    [
        ("tf-object-detection", np.eye(3, dtype=np.uint8)[[0, 1, 2, 0]], "(max_boxes, 5)"),
        ("tf-object-detection", np.zeros((4, 3, 4), np.uint8), "(max_boxes, 5)"),
        ("tf-segmentation", np.zeros((4, 2, 5), np.uint8), "masks (16, 16, 1)"),
        ("tf-segmentation", np.zeros((4, 8, 8, 1), np.uint8), "masks (16, 16, 1)"),
        ("tf-classification", np.zeros((4, 16, 16, 1), np.uint8), "(classes,) integer vector"),
    ],
)
def test_y_of_the_wrong_shape_is_one_line(tmp_path, capsys, layout, y, needs):
    x, _ = photo_tiles(4, 16, seed=3)
    src, out = str(tmp_path / "d.npz"), str(tmp_path / "o.tfrecords")
    np.savez(src, x_train=x, y_train=y)
    assert main(["convert", src, out, "--layout", layout]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needs in err, err
    assert f"{src}: split 'train', field 'y'" in err
    assert not os.path.exists(out)


def test_missing_x_or_bad_tiles_is_one_line(tmp_path, capsys):
    src, out = str(tmp_path / "d.npz"), str(tmp_path / "o.tfrecords")
    np.savez(
        src, features_train=np.zeros((3, 4), np.float32), y_train=np.zeros((3, 2, 5), np.uint8)
    )
    assert main(["convert", src, out, "--layout", "tf-object-detection"]) == 2
    assert "no field 'x'" in capsys.readouterr().err
    np.savez(src, x_train=np.zeros((3, 8, 8, 3), np.float32), y_train=np.zeros((3, 2, 5), np.uint8))
    assert main(["convert", src, out, "--layout", "tf-object-detection"]) == 2
    assert "field 'x'" in capsys.readouterr().err and not os.path.exists(out)


def test_od_filenames_from_a_field_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    x, _ = photo_tiles(9, 32, seed=7)
    names = np.array([f"tile-{i}-é.png" for i in range(9)])
    src = str(tmp_path / "d.npz")
    np.savez(src, x_train=x, y_train=od_labels(rng, 9, 32, 4), name_train=names)
    out, back = str(tmp_path / "o.tfrecords"), str(tmp_path / "b.npz")
    dstore.convert(src, out, layout="tf-object-detection", options={"filenames": "name"})
    recs = _records(out)
    assert [r["image/filename"][1][0].decode() for r in recs] == names.tolist()
    assert [r["image/source_id"][1][0].decode() for r in recs] == names.tolist()
    dstore.convert(out, back, layout="tf-object-detection")
    assert dstore.verify(src, back).ok


def test_other_fields_travel_unchanged(tmp_path):
    rng = np.random.default_rng(8)
    x, _ = photo_tiles(5, 32, seed=8)
    src = str(tmp_path / "d.npz")
    weights = rng.random((5, 3)).astype(np.float32)
    np.savez(src, x_train=x, y_train=od_labels(rng, 5, 32, 2), w_train=weights)
    out, back = str(tmp_path / "o.tfrecords"), str(tmp_path / "b.npz")
    dstore.convert(src, out, layout="tf-object-detection")
    with dstore.open(out) as ds:
        np.testing.assert_array_equal(ds["train"]["w"][:], weights)
    dstore.convert(out, back, layout="tf-object-detection")
    assert dstore.verify(src, back).ok


def test_unknown_layout_and_option(tmp_path, od_npz):
    src, _ = od_npz
    with pytest.raises(UsageError, match="unknown layout 'tf-nope'; available: tf-object"):
        dstore.convert(src, str(tmp_path / "o.tfrecords"), layout="tf-nope")
    # an option neither the layout nor the codec knows: the codec names it
    with pytest.raises(ValueError, match="unknown option"):
        dstore.convert(
            src, str(tmp_path / "o.tfrecords"), layout="tf-object-detection", options={"nope": "1"}
        )
    assert not os.path.exists(tmp_path / "o.tfrecords")


# -------------------------------------------------------------- segmentation, classification


def test_segmentation_round_trip_and_keys(tmp_path):
    x, _ = photo_tiles(12, 32, seed=4)
    y = (x[..., :1] // 64).astype(np.uint8)  # 4 classes following the photo's brightness
    src, out, back = str(tmp_path / "s.npz"), str(tmp_path / "s.tfrecords"), str(tmp_path / "b.npz")
    np.savez(src, x_train=x[:8], y_train=y[:8], x_val=x[8:], y_val=y[8:])
    dstore.convert(src, out, layout="tf-segmentation")
    from dstore.images.png import decode as png_decode

    recs = _records(out)
    assert set(recs[0]) == {
        "image/encoded",
        "image/format",
        "image/height",
        "image/width",
        "image/segmentation/class/encoded",
        "image/segmentation/class/format",
    }
    for i, rec in enumerate(recs):
        np.testing.assert_array_equal(png_decode(rec["image/encoded"][1][0]), x[i])
        np.testing.assert_array_equal(
            png_decode(rec["image/segmentation/class/encoded"][1][0]), y[i, ..., 0]
        )
        assert rec["image/segmentation/class/format"][1] == [b"png"]
    dstore.convert(out, back, layout="tf-segmentation")
    assert dstore.verify(src, back).ok
    with np.load(back) as got:
        assert sorted(got.files) == ["x_train", "x_val", "y_train", "y_val"]


def test_classification_round_trip_and_keys(tmp_path):
    x, y = photo_tiles(10, 32, seed=6)
    src, out, back = str(tmp_path / "c.npz"), str(tmp_path / "c.tfrecords"), str(tmp_path / "b.npz")
    np.savez(src, x_train=x, y_train=y)
    dstore.convert(src, out, layout="tf-classification")
    recs = _records(out)
    assert set(recs[0]) == {"image", "label"}
    assert [r["label"][1].tolist() for r in recs] == y.tolist()
    dstore.convert(out, back, layout="tf-classification")
    assert dstore.verify(src, back).ok


def test_the_other_way_to_zarr_and_back(tmp_path, od_npz):
    """A layout is not tied to TFRecord: the mapped fields go to any format (minus class/text
    lists, carried as serialized Features), and map back from it."""
    src, _ = od_npz
    mid, back = str(tmp_path / "o.zarr"), str(tmp_path / "b.npz")
    dstore.convert(src, mid, layout="tf-object-detection")
    dstore.convert(mid, back, layout="tf-object-detection")
    assert dstore.verify(src, back).ok


# --------------------------------------------------------------------------- registry


def test_formats_lists_the_layouts(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    for name in ("tf-object-detection", "tf-segmentation", "tf-classification"):
        assert name in out
    assert "-o class_names=" in out


def test_register_a_layout(tmp_path, od_npz):
    class Renamed(ObjectDetection):
        name = "renamed-od"

    register_layout(Renamed)
    try:
        assert "renamed-od" in layout_names() and get_layout_class("renamed-od") is Renamed
        with pytest.raises(ValueError, match="already registered"):
            register_layout(Renamed)
        dstore.convert(od_npz[0], str(tmp_path / "o.tfrecords"), layout="renamed-od")
        # files remember their layout: mapping back with another is refused by name
        with pytest.raises(SchemaError, match="written with layout 'renamed-od'"):
            dstore.convert(
                str(tmp_path / "o.tfrecords"), str(tmp_path / "b.npz"), layout="tf-object-detection"
            )
    finally:
        from dstore import layouts

        layouts._targets.pop("renamed-od", None)
        layouts._classes.pop("renamed-od", None)


def test_entry_point_group(tmp_path):
    """A package declaring ``[project.entry-points."dstore.layouts"]`` is listed by formats."""
    import subprocess
    import sys

    pkg = tmp_path / "mylayouts.py"
    pkg.write_text(
        "from dstore.layouts.label_maker import Classification\n"
        "class Mine(Classification):\n"
        "    name = 'my-layout'\n"
        "    help = 'a layout from another package'\n"
    )
    info = tmp_path / "mylayouts-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mylayouts\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dstore.layouts]\nmy-layout = mylayouts:Mine\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "formats"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "my-layout" in proc.stdout and "a layout from another package" in proc.stdout


@pytest.mark.parametrize(
    ("layout", "option", "says"),
    [
        ("tf-object-detection", "class_names=building,,road", "class_names has an empty name"),
        ("tf-classification", "image_encoding=jpeg", "expected one of png, tensor"),
    ],
)
def test_a_bad_layout_option_is_one_line(tmp_path, capsys, od_npz, layout, option, says):
    out = str(tmp_path / "o.tfrecords")
    assert main(["convert", od_npz[0], out, "--layout", layout, "-o", option]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and f"layout {layout}" in err
    assert not os.path.exists(out)
