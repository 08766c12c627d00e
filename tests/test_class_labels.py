"""label-maker's one-hot labels as a Hugging Face ``ClassLabel``: ``-o class_names=`` on a
one-hot field stores each record's class index in Parquet, which ``datasets`` reads as a
ClassLabel, and dstore reads back as the same one-hot rows, bit for bit."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.testing import read_all

pytest.importorskip("pyarrow")
pytest.importorskip("imagecodecs")

NAMES = ["astronaut", "coffee", "chelsea", "rocket", "retina", "ihc", "hubble"]


@pytest.fixture
def hf(tmp_path, monkeypatch):
    """``datasets``, offline, its cache in this test's folder."""
    for key, value in (("HF_DATASETS_OFFLINE", "1"), ("HF_HUB_OFFLINE", "1")):
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    return datasets


def _one_hot_npz(tmp_path, tiles, dtype=np.uint8) -> tuple[str, dict]:
    """A label-maker style npz whose one-hot labels are named ``label``."""
    x, y = tiles
    data = {
        "train": {"image": x[:40], "label": y[:40].astype(dtype)},
        "test": {"image": x[40:], "label": y[40:].astype(dtype)},
    }
    path = str(tmp_path / "data.npz")
    dstore.save(data, path)
    return path, data


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.bool_])
def test_one_hot_labels_become_a_class_label(tmp_path, capsys, tiles, hf, dtype):
    src, data = _one_hot_npz(tmp_path, tiles, dtype)
    dst = str(tmp_path / "data.parquet")
    assert main(["convert", src, dst, "-o", "class_names=" + ",".join(NAMES)]) == 0
    for split in ("train", "test"):
        files = sorted(glob.glob(os.path.join(dst, f"{split}-*.parquet")))
        ds = hf.Dataset.from_parquet(files, cache_dir=str(tmp_path / "hf-cache"))
        assert ds.features["label"] == hf.ClassLabel(names=NAMES)
        expected = data[split]["label"].argmax(axis=1)
        assert ds["label"][:] == expected.tolist()
        assert ds.features["label"].int2str(int(expected[0])) == NAMES[expected[0]]
        np.testing.assert_array_equal(np.asarray(ds[3]["image"]), data[split]["image"][3])
    # dstore reads the one-hot rows back, in their dtype, bit for bit
    back = read_all(dst)
    for split, fields in data.items():
        got = back[split]["label"]
        assert got.dtype == fields["label"].dtype and got.tobytes() == fields["label"].tobytes()
    assert main(["verify", src, dst]) == 0
    capsys.readouterr()
    npz = str(tmp_path / "back.npz")
    assert main(["convert", dst, npz]) == 0
    assert main(["verify", src, npz]) == 0


def test_load_dataset_reads_the_class_label(tmp_path, tiles, hf):
    src, data = _one_hot_npz(tmp_path, tiles)
    dst = str(tmp_path / "data.parquet")
    dstore.convert(src, dst, options={"class_names": ",".join(NAMES)})
    files = {s: sorted(glob.glob(os.path.join(dst, f"{s}-*.parquet"))) for s in data}
    loaded = hf.load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "cache"))
    train = loaded["train"]
    assert train.features["label"] == hf.ClassLabel(names=NAMES)
    assert train["label"][:] == data["train"]["label"].argmax(axis=1).tolist()


def test_a_row_that_is_not_one_hot_is_refused_by_record(tmp_path, capsys, tiles):
    src, data = _one_hot_npz(tmp_path, tiles)
    labels = data["train"]["label"].copy()
    labels[17] = 0
    labels[17, [1, 4]] = 1  # two classes: multi-hot
    dstore.save({"train": {"image": data["train"]["image"], "label": labels}}, src, overwrite=True)
    dst = str(tmp_path / "data.parquet")
    rc = main(["convert", src, dst, "-o", "class_names=" + ",".join(NAMES)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "field 'label', record 17: not one-hot (2 of 7 values set" in err
    assert not os.path.exists(dst) and os.listdir(tmp_path) == ["data.npz"]


def test_class_names_of_another_count_say_how_many(tmp_path, capsys, tiles):
    src, _ = _one_hot_npz(tmp_path, tiles)
    rc = main(["convert", src, str(tmp_path / "o.parquet"), "-o", "class_names=a,b"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "'label' has 7 values: give 7 class_names" in err, err
    rc = main(
        [
            "convert",
            src,
            str(tmp_path / "o.parquet"),
            "-o",
            "class_names=a,b",
            "-o",
            "label_field=label",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "a one-hot field of 2 values (one per name), not uint8 (7,)" in err, err
    assert os.listdir(tmp_path) == ["data.npz"]
