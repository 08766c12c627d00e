"""The Hugging Face card of a Parquet folder (issue #38): ``datasets.load_dataset(folder)``
reads exactly its splits and records through the README's ``configs`` and
``dataset_info`` (offline: no Hub, a temporary HF_HOME), never taking ``dstore.json``
or ``croissant.json`` for data; ``dstore card --hf`` writes the same README for a folder
written before; the YAML is what a YAML parser and ``datasets`` read back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dstore
from dstore.card.hf import to_yaml
from dstore.cli import main

datasets = pytest.importorskip("datasets")
yaml = pytest.importorskip("yaml")


@pytest.fixture(scope="module")
def parquet(tmp_path_factory, tiles, features) -> tuple[str, str]:
    """A source npz of real tiles, features, labels, names, and its Parquet conversion
    (two shards in train: the data_files list both)."""
    x, _ = tiles
    feats, labels = features
    root = tmp_path_factory.mktemp("hf")

    def split(lo: int, hi: int) -> dict[str, object]:
        return {
            "image": x[lo:hi, :32, :32],
            "feat": feats[lo:hi, :8].astype(np.float32),
            "label": labels[lo:hi].astype(np.int64),
            "name": np.array([f"tile {i}" for i in range(lo, hi)]),
        }

    src = str(root / "src.npz")
    dstore.save({"train": split(0, 40), "test": split(40, 50)}, src)
    out = str(root / "out.parquet")
    dstore.convert(src, out, dtype="feat=float16", options={"shard_mb": 0.02})
    return src, out


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _load_offline(folder: str, home: str) -> dict[str, object]:
    """``load_dataset(folder)`` in a child with no network and a fresh HF_HOME: each split's
    rows as Python values, and its features."""
    code = textwrap.dedent(
        f"""
        import json, datasets, numpy as np
        d = datasets.load_dataset({folder!r})
        out = {{}}
        for split, ds in d.items():
            rows = [{{k: (np.asarray(v).tolist() if k == "image" else v) for k, v in r.items()}}
                    for r in ds]
            out[split] = {{"rows": rows, "features": ds.features.to_dict()}}
        print(json.dumps(out))
        """
    )
    env = {
        **os.environ,
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": home,
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_loaded_is_dataset(loaded: dict[str, object], folder: str) -> None:
    with dstore.open(folder) as ds:
        assert sorted(loaded) == sorted(ds)
        for split in ds:
            rows = loaded[split]["rows"]
            assert len(rows) == ds[split].count
            for name in ds[split]:
                values = ds[split][name][:]
                got = [r[name] for r in rows]
                if isinstance(values, list):  # strings
                    assert got == values, name
                else:
                    assert np.array_equal(np.asarray(got, dtype=values.dtype), values), name


def test_load_dataset_reads_the_folder_as_its_card_says(tmp_path, parquet):
    _, out = parquet
    files = sorted(os.listdir(out))
    assert {"README.md", "croissant.json", "dstore.json"} <= set(files)
    assert sum(f.startswith("train-") for f in files) >= 2
    readme = _read(os.path.join(out, "README.md"))
    front = yaml.safe_load(readme.split("---\n")[1])
    (config,) = front["configs"]
    listed = {d["split"]: d["path"] for d in config["data_files"]}
    assert listed == {
        s: sorted(f for f in files if f.startswith(f"{s}-")) for s in ("train", "test")
    }
    info = front["dataset_info"]
    assert {s["name"]: s["num_examples"] for s in info["splits"]} == {"train": 40, "test": 10}
    shard_bytes = sum(
        os.path.getsize(os.path.join(out, f)) for f in files if f.endswith(".parquet")
    )
    assert info["download_size"] == shard_bytes
    assert info["dataset_size"] == sum(s["num_bytes"] for s in info["splits"])
    assert front["license"] == "unknown"
    assert "## Lossy choices and their measured error" in readme
    assert "feat: float32 -> float16" in readme

    loaded = _load_offline(out, str(tmp_path / "hf_home"))
    _assert_loaded_is_dataset(loaded, out)
    # the README's features are the ones datasets reads from the shards
    features = datasets.Features._from_yaml_list(info["features"])
    assert features.to_dict() == loaded["train"]["features"]


def test_card_hf_writes_the_readme_of_a_folder_written_before(tmp_path, parquet, capsys):
    src, _ = parquet
    old = str(tmp_path / "old.parquet")
    dstore.convert(src, old, card=False)  # as every Parquet folder was before cards
    assert not os.path.exists(os.path.join(old, "README.md"))
    argv = ["card", old, "--hf", "--license", "cc-by-4.0", "--name", "Photo tiles"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"wrote {os.path.join(old, 'README.md')}" in out
    readme = _read(os.path.join(old, "README.md"))
    front = yaml.safe_load(readme.split("---\n")[1])
    assert (front["license"], front["pretty_name"]) == ("cc-by-4.0", "Photo tiles")
    assert "# Photo tiles" in readme
    _assert_loaded_is_dataset(_load_offline(old, str(tmp_path / "hf_home")), old)
    # a later card keeps the README in step without --hf, and the values given before
    assert main(["card", old, "--description", "Tiles of skimage photos."]) == 0
    readme = _read(os.path.join(old, "README.md"))
    assert "Tiles of skimage photos." in readme and "license: cc-by-4.0" in readme


def test_a_users_readme_is_never_replaced(tmp_path, parquet, capsys):
    src, _ = parquet
    out = tmp_path / "out.parquet"
    dstore.convert(src, str(out), card=False)
    (out / "README.md").write_text("# my card\n")
    assert main(["card", str(out), "--hf"]) == 2
    assert "README.md: exists and dstore did not write it" in capsys.readouterr().err
    assert (out / "README.md").read_text() == "# my card\n"


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "yes",
        "null",
        "12",
        "1.5e3",
        'a "quoted": colon # not a comment',
        "line\nbreak\ttab",
        "ünïcödé ✓",
        "- dash",
        "",
        "[x]",
    ],
)
def test_yaml_reads_back_as_written(value):
    data = {
        "license": value,
        "configs": [{"config_name": value, "data_files": [{"split": "t", "path": [value, "b"]}]}],
        "dataset_info": {"features": [{"name": value, "list": {"list": "int64", "length": 3}}]},
        "n": 12,
        "flag": True,
        "empty": [],
    }
    assert yaml.safe_load(to_yaml(data)) == data
