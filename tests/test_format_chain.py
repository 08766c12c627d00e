"""TensorFlow Object Detection API records through every sharded format and back:
TFRecord -> each other sharded format in the registry (WebDataset, Parquet, ...) ->
TFRecord, ``dstore verify`` equal at every step, and TensorFlow parsing the last
file with the OD API's feature spec exactly as it parses the first (issue #23). The chain
comes from the registry: a new sharded format joins it by registering."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from dstore.cli import main
from dstore.registry import codecs_with, default_extension

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tf

from test_tf_compat import _od_records, _tf_write

#: the OD API's parsing spec for what these records hold
OD_SPEC = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string),
    "image/filename": tf.io.FixedLenFeature([], tf.string),
    "image/source_id": tf.io.FixedLenFeature([], tf.string),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/class/text": tf.io.VarLenFeature(tf.string),
}


def _parsed(files: list[str]) -> list[dict[str, object]]:
    """Every record of ``files`` as TensorFlow parses it with the OD spec, as Python values."""
    out = []
    for rec in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(rec, OD_SPEC)
        dense = {
            k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v for k, v in ex.items()
        }
        out.append({k: np.asarray(v.numpy()).tolist() for k, v in dense.items()})
    return out


#: every usable sharded format that keeps JPEG bytes as they came, then back to TFRecord
CHAIN = (
    *(n for n in codecs_with(lambda c: c.sharded and c.keeps_encoded_images) if n != "tfrecord"),
    "tfrecord",
)


@pytest.mark.parametrize("chain", [CHAIN])
def test_object_detection_records_survive_every_sharded_format(tmp_path, tiles, chain):
    x, _ = tiles
    recs, counts = _od_records(24, x)
    first = str(tmp_path / "train.tfrecord")
    _tf_write(first, recs)
    paths = [first]
    paths += [str(tmp_path / f"step{i}{default_extension(n)}") for i, n in enumerate(chain)]
    for a, b in itertools.pairwise(paths):
        assert main(["convert", a, b]) == 0, (a, b)
        assert main(["verify", a, b]) == 0, (a, b)
    assert main(["verify", paths[0], paths[-1]]) == 0
    last = sorted(
        os.path.join(paths[-1], f) for f in os.listdir(paths[-1]) if f.endswith(".tfrecord")
    )
    want, got = _parsed([first]), _parsed(last)
    assert len(got) == len(want) == len(counts)
    assert got == want  # every feature, value for value, JPEG bytes included
    assert [len(r["image/object/bbox/xmin"]) for r in got] == counts
    assert np.array_equal(
        tf.io.decode_jpeg(got[5]["image/encoded"]).numpy(),
        tf.io.decode_jpeg(want[5]["image/encoded"]).numpy(),
    )
