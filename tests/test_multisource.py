"""Many files as one dataset (a glob, a folder, @list) and --per-source back, with real
files written by the standard library's json and by numpy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from test_json import pyspacer_doc, write_json

import dstore
from dstore.api.per_source import write_per_source
from dstore.errors import CodecIOError, SchemaError, UnsafePathError
from dstore.model import Ragged, String, Tensor
from dstore.sources import many_files as sources
from dstore.testing import cli_command


def make_features(folder: Any, counts: list[int], dim: int = 24) -> list[dict[str, Any]]:
    os.makedirs(folder, exist_ok=True)
    docs = []
    for i, n in enumerate(counts):
        doc = pyspacer_doc(n, dim, seed=i)
        write_json(os.path.join(folder, f"img{i:03d}.json"), doc)
        docs.append(doc)
    return docs


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(cli_command(*argv), check=False, capture_output=True, text=True, env=env)


def test_glob_to_float16_npz_and_back_per_source(tmp_path: Any) -> None:
    counts = [30, 0, 5, 30, 1]
    docs = make_features(tmp_path / "features", counts)
    out = tmp_path / "feats.npz"
    report = dstore.convert(str(tmp_path / "features" / "*.json"), out, dtype="float16")
    assert report.records == sum(counts) and report.src_format == "json"
    # read by numpy itself
    with np.load(out) as z:
        want = np.concatenate(
            [
                np.array([p["data"] for p in d["point_features"]])
                for d in docs
                if d["point_features"]
            ]
        )
        np.testing.assert_array_equal(z["data"], want.astype(np.float16))
        names = [f"img{i:03d}.json" for i, n in enumerate(counts) for _ in range(n)]
        assert z["source"].tolist() == names
        assert z["row"].tolist() == [p["row"] for d in docs for p in d["point_features"]]
    with dstore.open(out) as ds:
        held = ds.schema.attrs[sources.SOURCES_ATTR]
        assert held["files"] == [f"img{i:03d}.json" for i in range(len(counts))]
        assert held["records"] == {"data": counts}
        # npoints differs between files: kept per file; the others are plain attributes
        assert [a["dstore.attrs/root/npoints"] for a in held["attrs"]] == [
            json.dumps({"json": n}) for n in counts
        ]
        assert set(ds.schema.attrs["dstore.attrs"]["root"]) == {"valid_rowcol", "feature_dim"}
    back = tmp_path / "back"
    rep = write_per_source(str(out), str(back))
    assert (rep.files, rep.records) == (len(counts) - 1, sum(counts))  # img001 has no record
    for i, doc in enumerate(docs):
        path = back / f"img{i:03d}.json"
        if not doc["point_features"]:
            assert not path.exists()
            continue
        with open(path) as f:
            got = json.load(f)
        got.pop("dstore:schema")
        for p in doc["point_features"]:  # what float16 made of them
            p["data"] = np.array(p["data"]).astype(np.float16).astype(float).tolist()
        assert got == doc


def test_folder_and_list_sources_with_nested_names(tmp_path: Any) -> None:
    make_features(tmp_path / "f" / "a", [2, 3], dim=4)
    make_features(tmp_path / "f" / "b", [4], dim=4)
    (tmp_path / "f" / ".hidden.json").write_text("not json")
    with dstore.open(tmp_path / "f") as ds:
        assert (
            ds["data"]["source"][:]
            == ["a/img000.json"] * 2 + ["a/img001.json"] * 3 + ["b/img000.json"] * 4
        )
    listing = tmp_path / "list.txt"
    listing.write_text("# pick two, in this order\nf/b/img000.json\n\nf/a/img000.json\n")
    with dstore.open(f"@{listing}") as ds:
        assert ds["data"]["source"][:] == ["f/b/img000.json"] * 4 + ["f/a/img000.json"] * 2
    dstore.convert(f"@{listing}", tmp_path / "o.h5")
    write_per_source(str(tmp_path / "o.h5"), str(tmp_path / "per"), to="npz")
    with np.load(tmp_path / "per" / "f" / "b" / "img000.npz") as z:
        assert z["row"].shape == (4,) and "source" not in z


@pytest.mark.parametrize("seed", range(8))
def test_any_counts_any_batch_size_spooled_or_not(tmp_path: Any, seed: int) -> None:
    """Records come out in file order whatever the files' sizes (some empty), the batch
    size, and whether parsed files are spooled or parsed again."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, rng.integers(1, 9)).tolist()
    docs = make_features(tmp_path / "f", counts, dim=3)
    want = [p["data"] for d in docs for p in d["point_features"]]
    pattern = str(tmp_path / "f" / "*.json")
    for spool in (False, True):
        paths, names = sources.expand(pattern)
        reader = sources.MultiReader(pattern, paths, names, dstore.get_codec("json"), spool)
        with reader:
            assert len(reader._spooled) == (sum(1 for n in counts if n) if spool else 0)
            for rows in (1, 2, 7, 1000):
                got = [b["data"] for b in reader.iter_batches("data", batch_rows=rows)]
                assert all(len(g) <= rows for g in got)
                flat = np.concatenate(got) if got else np.zeros((0, 3))
                np.testing.assert_array_equal(flat, np.array(want).reshape(-1, 3))
            start, stop = sorted(rng.integers(0, max(1, sum(counts)) + 1, 2).tolist())
            part = [b["data"] for b in reader.iter_batches("data", start=start, stop=stop)]
            np.testing.assert_array_equal(
                np.concatenate(part) if part else np.zeros((0, 3)),
                np.array(want).reshape(-1, 3)[start:stop],
            )


def test_kinds_unified_across_files(tmp_path: Any) -> None:
    """int in one file, float in another -> float64; vectors whose length differs
    between files -> ragged."""
    write_json(tmp_path / "a.json", [{"v": 1, "vec": [1, 2]}])
    write_json(tmp_path / "b.json", [{"v": 2.5, "vec": [1.5, 2, 3]}, {"v": 3, "vec": [4, 5, 6]}])
    with dstore.open(str(tmp_path / "*.json")) as ds:
        split = ds["data"]
        assert split["v"].kind == Tensor(np.dtype(np.float64), ())
        np.testing.assert_array_equal(split["v"][:], [1.0, 2.5, 3.0])
        assert split["vec"].kind == Ragged(np.dtype(np.float64), ())
        assert [r.tolist() for r in split["vec"][:]] == [[1, 2], [1.5, 2, 3], [4, 5, 6]]
        assert split["source"].kind == String()


@pytest.mark.parametrize(
    ("second", "match"),
    [
        ([{"v": "text"}], r"b\.json: split 'data', field 'v' is string, but in .*a\.json it is"),
        ([{"w": 1}], r"b\.json: split 'data' has no field 'v'"),
        ([{"v": 1}, {"v": "x"}], r"b\.json, field 'v', record 1: a string"),
    ],
)
def test_files_that_disagree_are_refused(tmp_path: Any, second: Any, match: str) -> None:
    write_json(tmp_path / "a.json", [{"v": 1}])
    write_json(tmp_path / "b.json", second)
    with pytest.raises(SchemaError, match=match):
        dstore.convert(str(tmp_path / "*.json"), tmp_path / "o.npz")
    assert not (tmp_path / "o.npz").exists()


def test_truncated_file_among_many_is_named(tmp_path: Any) -> None:
    make_features(tmp_path / "f", [3, 3, 3], dim=8)
    path = tmp_path / "f" / "img001.json"
    path.write_bytes(path.read_bytes()[:-40])
    run = run_cli("convert", str(tmp_path / "f" / "*.json"), str(tmp_path / "o.npz"))
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "img001.json: not valid JSON" in run.stderr
    assert not (tmp_path / "o.npz").exists()


def test_glob_that_matches_nothing(tmp_path: Any) -> None:
    run = run_cli("convert", str(tmp_path / "nothing" / "*.json"), str(tmp_path / "o.npz"))
    assert run.returncode == 2
    assert "the pattern matches no file" in run.stderr and run.stderr.count("\n") == 1
    assert os.listdir(tmp_path) == []
    with pytest.raises(CodecIOError, match="names no file"):
        (tmp_path / "empty.txt").write_text("# nothing\n")
        dstore.open(f"@{tmp_path / 'empty.txt'}")


def test_mixed_formats_refused(tmp_path: Any) -> None:
    write_json(tmp_path / "a.json", [{"v": 1}])
    np.savez(tmp_path / "b.npz", v=np.arange(2))
    with pytest.raises(SchemaError, match=r"b\.npz is npz, but .*a\.json is json"):
        dstore.open(tmp_path)


def test_per_source_names_never_leave_the_folder(tmp_path: Any) -> None:
    for evil in ("../evil.json", "a/../../evil.json", "/abs.json"):
        src = tmp_path / "s.npz"
        np.savez(src, v=np.arange(2), source=np.array(["ok.json", evil]))
        with pytest.raises(UnsafePathError) as e:
            write_per_source(str(src), str(tmp_path / "out"), to="json")
        # the message names the source the name came from, not only its bad component
        assert f"source {evil!r}, field 'source' of {src}" in str(e.value)
        assert sorted(os.listdir(tmp_path)) == ["s.npz"]
        src.unlink()


def test_per_source_cli(tmp_path: Any) -> None:
    make_features(tmp_path / "f", [2, 3], dim=4)
    assert run_cli("convert", str(tmp_path / "f"), str(tmp_path / "all.zarr")).returncode == 0
    run = run_cli("convert", str(tmp_path / "all.zarr"), str(tmp_path / "out"), "--per-source")
    assert run.returncode == 0, run.stderr
    assert "5 records from 2 sources -> 2 json files" in run.stdout
    assert sorted(os.listdir(tmp_path / "out")) == ["img000.json", "img001.json"]
    run = run_cli("convert", str(tmp_path / "all.zarr"), str(tmp_path / "out"), "--per-source")
    assert run.returncode == 2 and "exists" in run.stderr
    # --overwrite replaces an earlier per-source folder (it was silently ignored) ...
    before = os.stat(tmp_path / "out" / "img000.json").st_ino
    again = ("convert", str(tmp_path / "all.zarr"), str(tmp_path / "out"), "--per-source")
    run = run_cli(*again, "--overwrite")
    assert run.returncode == 0, run.stderr
    assert sorted(os.listdir(tmp_path / "out")) == ["img000.json", "img001.json"]
    assert os.stat(tmp_path / "out" / "img000.json").st_ino != before  # written anew
    # ... and nothing else: a folder that also holds the user's own files stays
    (tmp_path / "out" / "thesis.docx").write_bytes(b"mine")
    run = run_cli(*again, "--overwrite")
    assert run.returncode == 2 and "not a dataset in json format" in run.stderr, run.stderr
    assert (tmp_path / "out" / "thesis.docx").read_bytes() == b"mine"


# --------------------------------------------------- files whose fields don't line up


def pyspacer_npz(path: Any) -> None:
    """pyspacer's own npz: 30 feature rows beside a 3-entry meta."""
    rng = np.random.default_rng(0)
    np.savez_compressed(
        path,
        features=rng.standard_normal((30, 64)).astype(np.float32),
        rows=np.arange(30),
        cols=np.arange(30) * 2,
        meta=np.array([64, 30, 1]),
    )


def test_pyspacer_npz_names_the_odd_field(tmp_path: Any) -> None:
    pyspacer_npz(tmp_path / "p.npz")
    run = run_cli("convert", str(tmp_path / "p.npz"), str(tmp_path / "o.npz"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "'meta' does not line up with the 3 field(s) of 30 records" in run.stderr
    assert "--drop meta" in run.stderr
    assert sorted(os.listdir(tmp_path)) == ["p.npz"]


def test_pyspacer_npz_drop(tmp_path: Any) -> None:
    pyspacer_npz(tmp_path / "p.npz")
    run = run_cli("convert", str(tmp_path / "p.npz"), str(tmp_path / "o.npz"), "--drop", "meta")
    assert run.returncode == 0, run.stderr
    assert "key 'meta' (3,) left out" in run.stdout
    with np.load(tmp_path / "o.npz") as z, np.load(tmp_path / "p.npz") as p:
        assert sorted(z) == ["cols", "features", "rows"]
        for k in z:
            np.testing.assert_array_equal(z[k], p[k])
    with dstore.open(tmp_path / "p.npz", drop="meta") as ds:
        assert ds["data"].count == 30
    with pytest.raises(SchemaError, match="drop='nope': no such key"):
        dstore.open(tmp_path / "p.npz", drop="nope")


def test_label_maker_mismatch_still_refused(tmp_path: Any) -> None:
    """Two fields of different lengths: no majority; both named, nothing guessed."""
    np.savez(tmp_path / "lm.npz", x_train=np.zeros((5, 2)), y_train=np.zeros((4, 2)))
    with pytest.raises(SchemaError, match="different record counts"):
        dstore.open(tmp_path / "lm.npz")


def test_scan_reports_progress_per_file(tmp_path: Any) -> None:
    """The schema pass over many files (seconds of nothing for thousands of them) calls
    ``scan_progress(1, files)`` once per file, before the first record is written."""
    make_features(tmp_path / "feats", [3, 1, 4, 1, 5])
    calls: list[tuple[Any, ...]] = []
    dstore.convert(
        str(tmp_path / "feats" / "*.json"),
        str(tmp_path / "out.npz"),
        scan_progress=lambda n, total: calls.append(("scan", n, total)),
        progress=lambda n, total: calls.append(("write", n, total)),
    )
    assert calls[:5] == [("scan", 1, 5)] * 5
    assert {c[0] for c in calls[5:]} == {"write"}
    assert sum(c[1] for c in calls[5:]) == 14
    # verify and check scan the same way (the files are read as one dataset)
    glob = str(tmp_path / "feats" / "*.json")
    scans: list[tuple[int, int]] = []
    assert dstore.verify(glob, tmp_path / "out.npz", scan_progress=lambda *c: scans.append(c)).ok
    assert dstore.api.check(glob, scan_progress=lambda *c: scans.append(c)).ok
    assert scans == [(1, 5)] * 10


def test_per_source_decodes_encoded_images_unless_kept(tmp_path: Any, tiles: Any) -> None:
    """--per-source decodes PNG records to pixels for a format that does not keep them,
    as convert does, and --keep-encoded keeps the PNG bytes (the flag was ignored: the
    bytes were always written)."""
    import imagecodecs
    from test_tfrecord import BYTES, _example, _write_records

    x, _ = tiles
    # images of varying size: a TFRecord field of encoded images
    images = {"a": [x[0], x[1][:40]], "b": [x[2][:, :50], x[3][:30]]}
    pngs = {k: [imagecodecs.png_encode(im) for im in ims] for k, ims in images.items()}
    (tmp_path / "in").mkdir()
    for name, blobs in pngs.items():
        records = [_example(image=(BYTES, b)) for b in blobs]
        _write_records(str(tmp_path / "in" / f"{name}.tfrecord"), records)
    combined = tmp_path / "all.npz"
    dstore.convert(str(tmp_path / "in" / "*.tfrecord"), combined, keep_encoded=True)
    for flag, folder in (((), "pixels"), (("--keep-encoded",), "kept")):
        args = ("convert", str(combined), str(tmp_path / folder), "--per-source", "--to", "npz")
        run = run_cli(*args, *flag)
        assert run.returncode == 0, run.stderr
        for name in images:
            with dstore.open(tmp_path / folder / f"{name}.npz") as ds:
                split = ds[next(iter(ds.schema.splits))]
                got = [split["image"][i] for i in range(len(images[name]))]
            if flag:
                assert got == pngs[name]
            else:
                for g, want in zip(got, images[name], strict=True):
                    np.testing.assert_array_equal(g, want)


# ------------------------------------------- images whose size differs between files


def _astronaut() -> np.ndarray:
    from skimage import data

    return np.asarray(data.astronaut())


def _png_tfrecords(folder: Any, images: dict[str, list[np.ndarray]]) -> None:
    """One TFRecord file per entry, an ``image`` PNG feature per record: PNGs by PIL
    (file ``a``) and imagecodecs' libpng (the others), as real shards mix encoders."""
    import io

    import imagecodecs
    from PIL import Image as PILImage
    from test_tfrecord import BYTES, _example, _write_records

    folder.mkdir()
    for name, imgs in images.items():
        blobs = []
        for im in imgs:
            if name == "a":
                buf = io.BytesIO()
                PILImage.fromarray(im).save(buf, format="PNG")
                blobs.append(buf.getvalue())
            else:
                blobs.append(imagecodecs.png_encode(im))
        _write_records(
            str(folder / f"{name}.tfrecord"), [_example(image=(BYTES, b)) for b in blobs]
        )


def _size_cases() -> dict[str, dict[str, list[np.ndarray]]]:
    img = _astronaut()
    return {
        # every file's PNGs of one size (each file reads as a fixed uint8 tensor)
        "sizes": {"a": [img[:64, :64], img[64:128, :64]], "b": [img[:64, :50]] * 2},
        # a's PNGs of one size (a tensor), b's of two (an encoded image of varying size)
        "mixed": {
            "a": [img[:64, :64], img[100:164, 8:72]],
            "b": [img[:64, :50], img[:40, :64], img[200:230, 100:180]],
        },
    }


def _split_images(path: Any) -> tuple[Any, list[np.ndarray], list[str]]:
    with dstore.open(path) as ds:
        split = ds[next(iter(ds.schema.splits))]
        return (
            split["image"].kind,
            [np.asarray(split["image"][i]) for i in range(split.count)],
            [split["source"][i] for i in range(split.count)]
            if "source" in split.spec.fields
            else [],
        )


@pytest.mark.parametrize("to", ["npz", "tfrecord"])
@pytest.mark.parametrize("case", ["sizes", "mixed"])
def test_png_sizes_that_differ_between_tfrecord_files(tmp_path: Any, case: str, to: str) -> None:
    """Shards whose PNG sizes differ (refused before: 'field 'image' is uint8 (64, 50, 3),
    but in a.tfrecord it is uint8 (64, 64, 3)', and the same for a tensor beside an encoded
    image of varying size) read as one field of raw images of varying size: the pixels
    come out equal to the source images, per file too."""
    from dstore.model import Image

    images = _size_cases()[case]
    _png_tfrecords(tmp_path / "in", images)
    glob = str(tmp_path / "in" / "*.tfrecord")
    out = tmp_path / f"all.{to}"
    report = dstore.convert(glob, out)
    assert report.records == sum(len(v) for v in images.values())
    kind, got, names = _split_images(out)
    assert kind == Image(np.dtype(np.uint8), 3, None, None, "raw")
    want = [im for ims in images.values() for im in ims]
    assert names == [f"{k}.tfrecord" for k, ims in images.items() for _ in ims]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == np.uint8
        np.testing.assert_array_equal(g, w)
    assert dstore.verify(glob, out).ok
    # back to one file per source, each with its own images
    write_per_source(str(out), str(tmp_path / "back"), to="npz")
    for name, ims in images.items():
        _, back, _ = _split_images(tmp_path / "back" / f"{name}.npz")
        assert len(back) == len(ims)
        for g, w in zip(back, ims, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_image_arrays_whose_size_differs_between_files(tmp_path: Any, fmt: str) -> None:
    """npz files (numpy) and HDF5 files (h5py) whose uint8 image arrays differ in height
    and width: images of varying size (refused before; heights alone became a ragged
    uint8 (*, 64, 3), not images)."""
    import h5py

    from dstore.model import Image

    img = _astronaut()
    arrays = {
        "a": np.stack([img[:64, :64], img[64:128, 64:128]]),
        "b": np.stack([img[:50, :64]] * 3),
        "c": img[None, 300:340, 200:230],
    }
    (tmp_path / "in").mkdir()
    for name, arr in arrays.items():
        path = tmp_path / "in" / f"{name}.{fmt}"
        labels = np.arange(len(arr), dtype=np.int64)
        if fmt == "npz":
            np.savez(path, image=arr, label=labels)
        else:
            with h5py.File(path, "w") as f:
                f["image"] = arr
                f["label"] = labels
    glob = str(tmp_path / "in" / f"*.{fmt}")
    out = tmp_path / "all.npz"
    dstore.convert(glob, out)
    kind, got, _ = _split_images(out)
    assert kind == Image(np.dtype(np.uint8), 3, None, None, "raw")
    want = [im for arr in arrays.values() for im in arr]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert dstore.verify(glob, out).ok
    write_per_source(str(out), str(tmp_path / "back"), to="hdf5" if fmt == "h5" else fmt)
    for name, arr in arrays.items():
        _, back, _ = _split_images(tmp_path / "back" / f"{name}.{fmt}")
        assert len(back) == len(arr)
        for g, w in zip(back, arr, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    ("second", "match"),
    [
        # another dtype: still refused
        (lambda im: im[:, :50].astype(np.uint16) * 257, r"is uint16 \(64, 50, 3\), but in"),
        # another channel count
        (lambda im: np.dstack([im[:, :50], im[:, :50, :1]]), r"is uint8 \(64, 50, 4\), but in"),
        # not images: float tensors whose shape differs
        (lambda im: im[:, :50].astype(np.float32), r"is float32 \(64, 50, 3\), but in"),
    ],
)
def test_arrays_that_are_not_the_same_images_still_refused(
    tmp_path: Any, second: Any, match: str
) -> None:
    img = _astronaut()[:64]
    first = img[:, :64].astype(np.float32) if "float" in match else img[:, :64]
    np.savez(tmp_path / "a.npz", image=first[None])
    np.savez(tmp_path / "b.npz", image=second(img)[None])
    run = run_cli("convert", str(tmp_path / "*.npz"), str(tmp_path / "o.npz"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "b.npz: split 'data', field 'image'" in run.stderr
    assert re.search(match, run.stderr), run.stderr
    assert not (tmp_path / "o.npz").exists()


def test_fixed_rgb_beside_varying_rgba_pngs_refused(tmp_path: Any) -> None:
    img = _astronaut()
    rgba = np.dstack([img, img[..., :1]])
    _png_tfrecords(tmp_path / "in", {"a": [img[:64, :64]], "b": [rgba[:64, :50], rgba[:40]]})
    with pytest.raises(
        SchemaError, match=r"is image uint8 \(\*, \*, 4\) png, but in .*a\.tfrecord"
    ):
        dstore.convert(str(tmp_path / "in" / "*.tfrecord"), tmp_path / "o.npz")
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.tf
@pytest.mark.slow
def test_png_sizes_that_differ_read_by_tensorflow(tmp_path: Any) -> None:
    """Shards written by TensorFlow (tf.io.encode_png, TFRecordWriter), mixed sizes,
    converted to TFRecord and read back by tf.data with tf.io.decode_png."""
    tf = pytest.importorskip("tensorflow")
    images = _size_cases()["mixed"]
    (tmp_path / "in").mkdir()
    for name, ims in images.items():
        with tf.io.TFRecordWriter(str(tmp_path / "in" / f"{name}.tfrecord")) as w:
            for im in ims:
                png = tf.io.encode_png(im).numpy()
                feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
                w.write(
                    tf.train.Example(
                        features=tf.train.Features(feature=feature)
                    ).SerializeToString()
                )
    out = tmp_path / "out"
    dstore.convert(str(tmp_path / "in" / "*.tfrecord"), out, to="tfrecord")
    shards = sorted(str(p) for p in out.rglob("*.tfrecord"))
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "source": tf.io.FixedLenFeature([], tf.string),
    }
    got = [
        (tf.io.decode_png(ex["image"]).numpy(), ex["source"].numpy().decode())
        for ex in tf.data.TFRecordDataset(shards).map(lambda r: tf.io.parse_single_example(r, spec))
    ]
    want = [(im, f"{k}.tfrecord") for k, ims in images.items() for im in ims]
    assert len(got) == len(want)
    for (g, gname), (w, wname) in zip(got, want, strict=True):
        assert gname == wname
        np.testing.assert_array_equal(g, w)


def _gray16_tfrecords(folder: Any, last: bytes | None = None) -> list[np.ndarray]:
    """16-bit grey PNGs (imagecodecs): one size in a.tfrecord, two in b.tfrecord."""
    import imagecodecs
    from skimage import data
    from test_tfrecord import BYTES, _example, _write_records

    cam = data.camera().astype(np.uint16) * 257
    images = {"a": [cam[:64, :64], cam[64:128, :64]], "b": [cam[:30, :64], cam[200:240, 9:59]]}
    folder.mkdir()
    for name, ims in images.items():
        blobs = [imagecodecs.png_encode(im) for im in ims]
        if name == "b" and last is not None:
            blobs[-1] = last(blobs[-1])
        _write_records(
            str(folder / f"{name}.tfrecord"), [_example(image=(BYTES, b)) for b in blobs]
        )
    return [im for ims in images.values() for im in ims]


def test_grey_16_bit_pngs_of_one_size_beside_several(tmp_path: Any) -> None:
    """uint16 (H, W) pixels of a.tfrecord beside b's 16-bit grey PNGs of varying size
    (refused before): pixels of varying size, equal to the sources."""
    from dstore.model import Image

    want = _gray16_tfrecords(tmp_path / "in")
    dstore.convert(str(tmp_path / "in" / "*.tfrecord"), tmp_path / "o.npz")
    kind, got, _ = _split_images(tmp_path / "o.npz")
    assert kind == Image(np.dtype(np.uint16), 0, None, None, "raw")
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.uint16
        np.testing.assert_array_equal(g, w)


def test_png_that_does_not_decode_beside_pixels_is_named(tmp_path: Any) -> None:
    """A truncated PNG in the file whose images are decoded to match the others: one line
    naming the file, split, field and record, without the --keep-encoded hint (it would
    not help: the field is pixels), and nothing written."""
    _gray16_tfrecords(tmp_path / "in", last=lambda png: png[:60])
    run = run_cli("convert", str(tmp_path / "in" / "*.tfrecord"), str(tmp_path / "o.npz"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "b.tfrecord: split 'data', field 'image', record 1: not a decodable png" in run.stderr
    assert "--keep-encoded" not in run.stderr and "convert the file alone" in run.stderr
    assert not (tmp_path / "o.npz").exists()


def test_png_sizes_that_differ_between_arrayrecord_files(tmp_path: Any) -> None:
    """ArrayRecord files (array_record's writer) of Example records infer their fields as
    TFRecord does: PNGs of one size in one file, of two in another (refused before)."""
    import imagecodecs
    from array_record.python.array_record_module import ArrayRecordWriter
    from test_tfrecord import BYTES, _example

    images = _size_cases()["mixed"]
    (tmp_path / "in").mkdir()
    for name, ims in images.items():
        w = ArrayRecordWriter(str(tmp_path / "in" / f"{name}.arrayrecord"), "group_size:1")
        for im in ims:
            w.write(_example(image=(BYTES, imagecodecs.png_encode(im))))
        w.close()
    glob = str(tmp_path / "in" / "*.arrayrecord")
    dstore.convert(glob, tmp_path / "o.npz")
    _, got, _ = _split_images(tmp_path / "o.npz")
    want = [im for ims in images.values() for im in ims]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert dstore.verify(glob, tmp_path / "o.npz").ok
