"""Proof that TensorFlow reads what dstore writes, and dstore reads what TensorFlow writes.

Runs with real TensorFlow (the ``tf`` extra, installed in CI by ``.ci/run``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import dstore
from dstore.testing import read_all

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tf


def _feature_description(path: str, split: str) -> dict:
    """Execute the lines ``dstore info`` prints, as a TF user would paste them."""
    from dstore.codecs.tfrecord import TFRecordReader

    lines = TFRecordReader(path).feature_description(split)
    namespace = {"tf": tf}
    exec("\n".join(ln for ln in lines if not ln.startswith("#")), namespace)  # noqa: S102
    return namespace["feature_description"]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_tensorflow_reads_dstore_shards(tmp_path, tiles, compression):
    x, y = tiles
    ints = np.arange(len(x), dtype=np.int16) - 30
    out = str(tmp_path / "d.tfrecords")
    dstore.save(
        {"train": {"x": x, "y": y, "k": ints}},
        out,
        compression=compression,
        shard_mb="0.1",
    )
    with dstore.open(out) as ds:
        files = [os.path.join(out, f) for f in sorted(os.listdir(out)) if f.endswith(".tfrecord")]
        assert len(files) > 1 and ds["train"].count == len(x)
    desc = _feature_description(out, "train")
    ctype = "GZIP" if compression == "gzip" else ""
    records = list(tf.data.TFRecordDataset(files, compression_type=ctype))
    assert len(records) == len(x)
    for i, rec in enumerate(records):
        ex = tf.io.parse_single_example(rec, desc)
        img = tf.io.decode_png(ex["x"], channels=3, dtype=tf.uint8).numpy()
        np.testing.assert_array_equal(img, x[i])
        np.testing.assert_array_equal(ex["y"].numpy(), y[i].astype(np.int64))
        assert int(ex["k"].numpy()) == ints[i]


def test_to_tf_dataset_restores_dtypes_and_shapes(tmp_path, tiles):
    x, y = tiles
    f16 = np.linspace(-3, 3, len(x) * 4).astype(np.float16).reshape(len(x), 2, 2)
    gray = x[..., 0].copy()
    deep = (x[..., :3].astype(np.uint16) * 257 + 3)
    rgba = np.concatenate([x, x[..., :1]], axis=-1)
    out = str(tmp_path / "d.tfrecords")
    data = {"x": x, "y": y, "h": f16, "g": gray, "d": deep, "a": rgba}
    dstore.save({"train": data}, out)
    ds = dstore.to_tf_dataset(out, split="train")
    got = {k: [] for k in data}
    for ex in ds:
        for k in got:
            got[k].append(ex[k].numpy())
    for k, ref in data.items():
        arr = np.stack(got[k])
        assert arr.dtype == ref.dtype, k
        np.testing.assert_array_equal(arr, ref)


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_dstore_reads_tensorflow_written_files(tmp_path, tiles, compression):
    x, y = tiles
    label = y.argmax(1)
    path = str(tmp_path / "train.tfrecord")
    opts = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(path, opts) as w:
        for img, lab, vec in zip(x, label, y, strict=True):
            ex = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[tf.io.encode_png(img).numpy()])
                        ),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(lab)])),
                        "onehot": tf.train.Feature(float_list=tf.train.FloatList(value=vec.tolist())),
                    }
                )
            )
            w.write(ex.SerializeToString())
    got = read_all(path)
    assert list(got) == ["train"]
    np.testing.assert_array_equal(got["train"]["image"], x)
    np.testing.assert_array_equal(got["train"]["label"], label)
    np.testing.assert_array_equal(got["train"]["onehot"], y.astype(np.float32))
    # and onwards to another format, bit-exact
    back = str(tmp_path / "tf.npz")
    dstore.convert(path, back)
    assert dstore.verify(path, back).ok
