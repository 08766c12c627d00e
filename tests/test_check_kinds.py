"""dstore check on every registered format, on feature vectors (CoralNet), on many files,
on encoded images of a training layout; its near-pair searches against all pairs."""

from __future__ import annotations

import numpy as np
import pytest

import dstore
from dstore.check.hamming import near_pairs
from dstore.check.labelled import labelled_set
from dstore.check.perceptual import hamming
from dstore.check.vectors import cosine_pairs, project
from dstore.model.labels import LABEL_NAMES, is_label_name
from dstore.testing import usable_formats

pytest.importorskip("skimage")


@pytest.fixture(scope="module")
def small_set():
    return labelled_set(32, copies=4, seed=1)


@pytest.fixture(scope="module")
def small_npz(small_set, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("kinds") / "small.npz")
    np.savez(path, **{f"{k}_{s}": v for s, d in small_set.splits.items() for k, v in d.items()})
    return path


@pytest.mark.parametrize("name", sorted(usable_formats(text=True)))
def test_every_format_gives_the_pairs_of_its_source(name, small_npz, tmp_path):
    dst = str(tmp_path / f"out{usable_formats(text=True)[name]}")
    dstore.convert(small_npz, dst, to=name)
    expected = dstore.check(small_npz).to_json()
    assert expected["summary"]["pairs"]["exact"] == 4  # the set's exact copies, at least
    got = dstore.check(dst, format=name).to_json()
    assert got["duplicates"] == expected["duplicates"]
    assert got["summary"]["leakage"] == expected["summary"]["leakage"]


def _features(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from dstore.demo import hog_features

    pytest.importorskip("scipy")
    return hog_features(n, seed=seed)


def test_coralnet_features_exact_and_near_across_splits(tmp_path, capsys):
    feats, labels = _features(300, seed=2)
    rng = np.random.default_rng(0)
    near = feats[10:20] * (1 + 0.02 * rng.standard_normal(feats[10:20].shape)).astype(np.float32)
    test = np.concatenate([feats[200:], feats[:5], near])  # 5 exact, 10 near copies
    path = str(tmp_path / "features.npz")
    np.savez(
        path,
        features_train=feats[:200],
        labels_train=labels[:200],
        features_test=test.astype(np.float16),
        labels_test=np.concatenate([labels[200:], labels[:5], labels[10:20]]),
    )
    # float16 in test, float32 in train: the values differ, so the exact copies are near
    report = dstore.check(path)
    assert report.fields.vectors == ("features",) and report.fields.labels == ("labels",)
    leak = report.leakage["test"]["train"]
    assert leak["records"] >= 15
    for p in report.duplicates:
        a, b = (p[e]["index"] for e in "ab")
        xa = feats[a] if p["a"]["split"] == "train" else test[a]
        xb = feats[b] if p["b"]["split"] == "train" else test[b]
        cos = float(xa @ xb / np.linalg.norm(xa) / np.linalg.norm(xb))
        assert cos >= 0.97, (p, cos)  # no pair far below the threshold
    np.savez(path, features_train=feats[:200], features_test=test[:105].astype(np.float32))
    report = dstore.check(path)
    assert report.leakage["test"]["train"]["exact"] == 5


def test_many_files_source_field_left_out(tmp_path):
    feats, _ = _features(40, seed=4)
    parts = [feats[10 * k : 10 * k + 10] for k in range(4)]
    parts[3] = np.concatenate([parts[3], feats[:2]])  # two vectors of file 0 again
    for k, part in enumerate(parts):
        np.savez(tmp_path / f"img{k}.npz", features=part)
    report = dstore.check(str(tmp_path / "img*.npz"))
    assert "source" not in report.fields.exact
    every = np.concatenate(parts)
    repeated = len(every) - len(np.unique(every, axis=0))  # file 0's two, and any equal rows
    assert repeated >= 2 and report.to_json()["summary"]["pairs"]["exact"] == repeated


def test_training_layout_encoded_images_and_annotations(tmp_path):
    """The Object Detection layout's PNG bytes are decoded and hashed; its boxes and class
    ids are labels, not data: two tiles with other boxes are still duplicates. Its
    filenames make every record unique: equal images are near (distance 0) unless the
    image is the field checked."""
    from dstore.demo import make_label_maker_npz

    pytest.importorskip("scipy")
    src = make_label_maker_npz(str(tmp_path / "od.npz"), 24, task="object-detection")
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["x_test"] = np.concatenate([arrays["x_test"], arrays["x_train"][:2]])
    arrays["y_test"] = np.concatenate([arrays["y_test"], arrays["y_train"][:2][:, ::-1]])
    np.savez(src, **arrays)
    dst = str(tmp_path / "od.tfrecords")
    dstore.convert(src, dst, layout="tf-object-detection", options={"class_names": "a,b,c"})
    report = dstore.check(dst)
    assert "image/encoded" in report.fields.images
    assert not any(n.startswith("image/object/") for n in report.fields.exact)
    assert report.leakage["test"]["train"] == {
        "records": 2,
        "exact": 0,
        "near": 2,
        "percent": 28.571,
    }
    assert {p["distance"] for p in report.duplicates} == {0}
    assert [p["labels_differ"] for p in report.duplicates] == [True, False]  # boxes reordered
    report = dstore.check(dst, fields=["image/encoded"])
    assert report.leakage["test"]["train"]["exact"] == 2


def test_label_names_cover_the_layouts():
    from dstore.layouts import tiles as lm

    for name in (lm.LABEL, lm.TEXT, *lm.BOX_FIELDS, lm.MASK, lm.MASK_FORMAT, *LABEL_NAMES):
        assert is_label_name(name), name
    for name in (lm.IMAGE, lm.FORMAT, lm.HEIGHT, lm.WIDTH, "x", "features"):
        assert not is_label_name(name), name


def test_hamming_pairs_equal_all_pairs():
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**63, 1500, dtype=np.uint64) << np.uint64(1)
    flips = [
        sum(1 << int(b) for b in rng.choice(64, rng.integers(1, 10), replace=False))
        for _ in range(300)
    ]
    hashes = np.unique(np.concatenate([base, base[:300] ^ np.array(flips, np.uint64)]))
    d = hamming(hashes[:, None], hashes[None, :])
    for radius in (1, 4, 9, 20):
        i, j, dist = near_pairs(hashes, radius)
        want = {(a, b) for a, b in zip(*np.nonzero(np.triu(d <= radius, k=1)), strict=True)}
        assert set(zip(i.tolist(), j.tolist(), strict=True)) == want
        assert np.array_equal(dist, d[i, j])


def test_cosine_pairs_find_the_close_pairs_of_all_pairs():
    feats, _ = _features(600, seed=6)
    feats = feats[np.linalg.norm(feats, axis=1) > 0]  # a flat tile has no gradient at all
    rng = np.random.default_rng(1)
    noisy = feats[:100] + 0.05 * np.linalg.norm(feats[:100], axis=1, keepdims=True) / np.sqrt(
        feats.shape[1]
    ) * rng.standard_normal(feats[:100].shape).astype(np.float32)
    x = np.concatenate([feats, noisy])
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    true = unit @ unit.T
    i, j, cos = cosine_pairs(project(x), 0.98)
    want = set(zip(*np.nonzero(np.triu(true >= 0.985, k=1)), strict=True))
    got = set(zip(i.tolist(), j.tolist(), strict=True))
    assert len(want) >= 100 and len(want - got) <= 0.02 * len(want)
    # the estimated cosine is close to the true one
    assert np.abs(cos - true[i, j]).max() < 0.01


def test_encoded_images_hash_as_their_pixels(small_set):
    """A batch of PNG bytes (what convert --check sees when images pass through encoded)
    hashes as the same pixels stored raw: exact digests and pHashes alike."""
    imagecodecs = pytest.importorskip("imagecodecs")
    from dstore.check.collect import Collector
    from dstore.check.fields import check_fields
    from dstore.model import Image, VarColumn
    from dstore.model.schema import FieldSpec, Schema, SplitSpec

    tiles = small_set.splits["train"]["x"][:6]
    raw = Schema(
        {"train": SplitSpec("train", 6, {"x": FieldSpec("x", Image(height=32, width=32))})}
    )
    png = Schema({"train": SplitSpec("train", 6, {"x": FieldSpec("x", Image(encoding="png"))})})
    found = []
    for schema, column in (
        (raw, tiles),
        (png, VarColumn.from_bytes(imagecodecs.png_encode(t) for t in tiles)),
    ):
        collector = Collector(schema, check_fields(schema), "x")
        collector.add("train", 0, {"x": column})
        rec = collector.result()
        found.append((rec.digest.copy(), rec.images["x"][0].copy()))
    assert np.array_equal(found[0][0], found[1][0]) and np.array_equal(found[0][1], found[1][1])
    assert len(np.unique(found[0][0], axis=0)) == 6
