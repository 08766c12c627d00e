"""Layouts read by real TensorFlow with the parse specs its model libraries use.

The Object Detection API's ``TfExampleDecoder`` parses ``image/encoded``,
``image/format``, ``image/filename``, ``image/source_id`` as
``FixedLenFeature((), tf.string)``, ``image/height|width`` as
``FixedLenFeature((), tf.int64)``, the boxes as ``VarLenFeature(tf.float32)``,
``class/label`` as ``VarLenFeature(tf.int64)`` and ``class/text`` as
``VarLenFeature(tf.string)``; DeepLab's ``data_generator`` parses its keys as
fixed-length strings and ints.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from test_layouts import od_labels, write_od_npz  # tests/ is on sys.path (rootdir)

import dstore
from dstore.demo import photo_tiles

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tf

OD_SPEC = {
    "image/encoded": ((), "string"),
    "image/format": ((), "string"),
    "image/filename": ((), "string"),
    "image/source_id": ((), "string"),
    "image/height": ((), "int64"),
    "image/width": ((), "int64"),
}


def _parse(path: str, split: str, spec: dict) -> list[dict]:
    files = sorted(glob.glob(os.path.join(path, f"{split}-*.tfrecord")))
    assert files
    return [
        {k: v for k, v in tf.io.parse_single_example(rec, spec).items()}
        for rec in tf.data.TFRecordDataset(files)
    ]


def _od_spec() -> dict:
    spec = {
        k: tf.io.FixedLenFeature(shape, getattr(tf, dtype)) for k, (shape, dtype) in OD_SPEC.items()
    }
    for c in ("xmin", "ymin", "xmax", "ymax"):
        spec[f"image/object/bbox/{c}"] = tf.io.VarLenFeature(tf.float32)
    spec["image/object/class/label"] = tf.io.VarLenFeature(tf.int64)
    spec["image/object/class/text"] = tf.io.VarLenFeature(tf.string)
    return spec


def test_object_detection_api_parses_the_records(tmp_path):
    src = str(tmp_path / "data.npz")
    arrays = write_od_npz(src, seed=11, size=64, most=7)
    out = str(tmp_path / "od.tfrecords")
    dstore.convert(src, out, layout="tf-object-detection", options={"class_names": "building,road"})
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        parsed = _parse(out, split, _od_spec())
        assert len(parsed) == len(x)
        for i, ex in enumerate(parsed):
            boxes = y[i][y[i].any(axis=1)].astype(np.float64)
            img = tf.io.decode_png(ex["image/encoded"], channels=3).numpy()
            np.testing.assert_array_equal(img, x[i])
            assert ex["image/format"].numpy() == b"png"
            assert ex["image/height"].numpy() == 64 and ex["image/width"].numpy() == 64
            assert ex["image/filename"].numpy() == str(i).encode() == ex["image/source_id"].numpy()
            for k, c in enumerate(("xmin", "ymin", "xmax", "ymax")):
                got = tf.sparse.to_dense(ex[f"image/object/bbox/{c}"]).numpy()
                assert got.dtype == np.float32
                # within float32 precision of the pixel coordinate over the tile size
                np.testing.assert_allclose(got, boxes[:, k] / 64, rtol=2**-24, atol=0)
            labels = tf.sparse.to_dense(ex["image/object/class/label"]).numpy()
            assert labels.tolist() == y[i][y[i].any(axis=1)][:, 4].tolist()
            text = tf.sparse.to_dense(ex["image/object/class/text"], default_value=b"").numpy()
            assert text.tolist() == [[b"building", b"road"][c - 1] for c in labels]


def test_to_tf_dataset_reads_the_layout_records(tmp_path):
    """dstore's own tf.data reader on the layout's output: boxes, labels and class text
    per record as variable-length tensors (class text is a list of strings)."""
    src = str(tmp_path / "data.npz")
    arrays = write_od_npz(src, seed=5, size=64, most=5)
    out = str(tmp_path / "od.tfrecords")
    dstore.convert(src, out, layout="tf-object-detection", options={"class_names": "building,road"})
    y = arrays["y_train"]
    got = list(dstore.to_tf_dataset(out, split="train", ordered=True))
    assert len(got) == len(y)
    for i, rec in enumerate(got):
        rows = y[i][y[i].any(axis=1)]
        labels = rec["image/object/class/label"].numpy()
        assert labels.tolist() == rows[:, 4].tolist()
        names = rec["image/object/class/text"].numpy().tolist()
        assert names == [[b"building", b"road"][c - 1] for c in labels]
        xmin = rec["image/object/bbox/xmin"].numpy()
        np.testing.assert_allclose(xmin, rows[:, 0].astype(np.float64) / 64, rtol=2**-24, atol=0)


def test_clipped_boxes_stay_in_the_unit_square_for_tensorflow(tmp_path):
    rng = np.random.default_rng(12)
    x, _ = photo_tiles(5, 32, seed=12)
    y = od_labels(rng, 5, 32, 3)
    y[2, 0] = [10, 10, 250, 31, 1]
    src, out = str(tmp_path / "d.npz"), str(tmp_path / "o.tfrecords")
    np.savez(src, x_train=x, y_train=y)
    report = dstore.convert(src, out, layout="tf-object-detection")
    assert any("1 box(es) in 1 record(s)" in n for n in report.notes)
    ex = _parse(out, "train", _od_spec())[2]
    assert tf.sparse.to_dense(ex["image/object/bbox/xmax"]).numpy()[0] == 1.0


def test_deeplab_parses_the_segmentation_records(tmp_path):
    x, _ = photo_tiles(6, 48, seed=13)
    y = (x[..., 1:2] // 50).astype(np.uint8)
    src, out = str(tmp_path / "s.npz"), str(tmp_path / "s.tfrecords")
    np.savez(src, x_train=x, y_train=y)
    dstore.convert(src, out, layout="tf-segmentation")
    spec = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/format": tf.io.FixedLenFeature((), tf.string, default_value="jpeg"),
        "image/height": tf.io.FixedLenFeature((), tf.int64, default_value=0),
        "image/width": tf.io.FixedLenFeature((), tf.int64, default_value=0),
        "image/segmentation/class/encoded": tf.io.FixedLenFeature((), tf.string, default_value=""),
        "image/segmentation/class/format": tf.io.FixedLenFeature(
            (), tf.string, default_value="png"
        ),
    }
    parsed = _parse(out, "train", spec)
    assert len(parsed) == 6
    for i, ex in enumerate(parsed):
        np.testing.assert_array_equal(tf.io.decode_png(ex["image/encoded"], 3).numpy(), x[i])
        mask = tf.io.decode_png(ex["image/segmentation/class/encoded"], channels=1).numpy()
        np.testing.assert_array_equal(mask, y[i])
        assert ex["image/format"].numpy() == b"png"
        assert ex["image/segmentation/class/format"].numpy() == b"png"
        assert (ex["image/height"].numpy(), ex["image/width"].numpy()) == (48, 48)


def test_classification_records_read_as_label_maker_names_them(tmp_path):
    x, y = photo_tiles(7, 32, seed=14)
    src, out = str(tmp_path / "c.npz"), str(tmp_path / "c.tfrecords")
    np.savez(src, x_train=x, y_train=y)
    dstore.convert(src, out, layout="tf-classification")
    spec = {
        "image": tf.io.FixedLenFeature((), tf.string),
        "label": tf.io.FixedLenFeature((y.shape[1],), tf.int64),
    }
    parsed = _parse(out, "train", spec)
    for i, ex in enumerate(parsed):
        np.testing.assert_array_equal(tf.io.decode_png(ex["image"], 3).numpy(), x[i])
        assert ex["label"].numpy().tolist() == y[i].tolist()


def test_records_written_by_tensorflow_map_back(tmp_path):
    """OD API records written by TensorFlow itself (no dstore manifest): boxes padded to the
    largest count, pixels recovered, the file names kept as a field."""
    x, _ = photo_tiles(4, 32, seed=15)
    boxes = [[[1, 2, 9, 10, 1]], [], [[0, 0, 32, 32, 2], [3, 4, 5, 6, 1]], [[7, 7, 8, 8, 1]]]
    path = str(tmp_path / "train.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i, bx in enumerate(boxes):
            b = np.array(bx, np.float64).reshape(-1, 5)

            def floats(v):
                return tf.train.Feature(float_list=tf.train.FloatList(value=v))

            def ints(v):
                return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

            def strs(v):
                return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))

            feats = {
                "image/encoded": strs([tf.io.encode_png(x[i]).numpy()]),
                "image/format": strs([b"png"]),
                "image/height": ints([32]),
                "image/width": ints([32]),
                "image/filename": strs([f"f{i}.png".encode()]),
                "image/source_id": strs([f"f{i}.png".encode()]),
                "image/object/bbox/xmin": floats((b[:, 0] / 32).tolist()),
                "image/object/bbox/ymin": floats((b[:, 1] / 32).tolist()),
                "image/object/bbox/xmax": floats((b[:, 2] / 32).tolist()),
                "image/object/bbox/ymax": floats((b[:, 3] / 32).tolist()),
                "image/object/class/label": ints(b[:, 4].astype(int).tolist()),
            }
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            w.write(ex.SerializeToString())
    back = str(tmp_path / "b.npz")
    dstore.convert(path, back, layout="tf-object-detection")
    with np.load(back) as got:
        np.testing.assert_array_equal(got["x_train"], x)
        y = got["y_train"]
        assert y.shape == (4, 2, 5)
        for i, bx in enumerate(boxes):
            want = np.zeros((2, 5))
            want[: len(bx)] = np.array(bx).reshape(-1, 5)
            np.testing.assert_array_equal(y[i], want)
    with dstore.open(back) as ds:  # what the layout does not map is kept, under its key
        assert ds["train"]["image/filename"][:] == [f"f{i}.png" for i in range(4)]


def test_image_codec_is_passed_to_the_codec_and_written(tmp_path):
    """``-o image_codec=jpeg`` reaches the TFRecord codec (where JPEG encoding exists) and
    ``image/format`` says what it wrote; the boxes do not depend on it."""
    import dataclasses

    from dstore.codecs.tfrecord import TFRecordOptions

    src = str(tmp_path / "data.npz")
    arrays = write_od_npz(src, seed=16, size=64, most=3)
    out = str(tmp_path / "od.tfrecords")
    options = {"image_codec": "jpeg"}
    if "image_codec" not in {f.name for f in dataclasses.fields(TFRecordOptions)}:
        # before JPEG encoding lands the codec refuses the key by name, with nothing written
        with pytest.raises(ValueError, match=r"unknown option.*image_codec"):
            dstore.convert(src, out, layout="tf-object-detection", options=options)
        assert not os.path.exists(out)
        return
    dstore.convert(src, out, layout="tf-object-detection", options=options)
    y = arrays["y_train"]
    for i, ex in enumerate(_parse(out, "train", _od_spec())):
        assert ex["image/format"].numpy() == b"jpeg"
        assert tf.io.decode_jpeg(ex["image/encoded"], channels=3).numpy().shape == (64, 64, 3)
        labels = tf.sparse.to_dense(ex["image/object/class/label"]).numpy()
        assert labels.tolist() == y[i][y[i].any(axis=1)][:, 4].tolist()


def test_classification_as_label_maker_writes_it(tmp_path):
    """``-o image_encoding=tensor``: the bytes of ``tf.io.serialize_tensor``, which
    label-maker's pipelines read with ``tf.io.parse_tensor``; and back, exactly."""
    x, y = photo_tiles(5, 32, seed=17)
    src, out = str(tmp_path / "c.npz"), str(tmp_path / "c.tfrecords")
    back = str(tmp_path / "b.npz")
    np.savez(src, x_train=x, y_train=y)
    dstore.convert(src, out, layout="tf-classification", options={"image_encoding": "tensor"})
    spec = {
        "image": tf.io.FixedLenFeature((), tf.string),
        "label": tf.io.FixedLenFeature((y.shape[1],), tf.int64),
    }
    for i, ex in enumerate(_parse(out, "train", spec)):
        assert ex["image"].numpy() == tf.io.serialize_tensor(x[i]).numpy()
        np.testing.assert_array_equal(tf.io.parse_tensor(ex["image"], tf.uint8).numpy(), x[i])
        assert ex["label"].numpy().tolist() == y[i].tolist()
    dstore.convert(out, back, layout="tf-classification")
    assert dstore.verify(src, back).ok
