"""JSON Lines of several splits: a folder of one file per split, its manifest checked
against the files (never trusted), replaced only when it holds nothing of the user's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.demo import photo_tiles
from dstore.errors import DstoreError, OutputExistsError, SchemaError


def _data(n: int = 30) -> dict[str, dict[str, np.ndarray]]:
    x, y = photo_tiles(n, 8, seed=5)
    return {
        "train": {"x": x[: n - 10], "y": y[: n - 10]},
        "test": {"x": x[n - 10 :], "y": y[n - 10 :]},
        "empty": {"x": x[:0], "y": y[:0]},
    }


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "dstore.json").read_text(encoding="utf-8"))


def _write_manifest(folder: Path, m: dict) -> None:
    (folder / "dstore.json").write_text(json.dumps(m), encoding="utf-8")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "d.jsonl"
    dstore.save(_data(), str(out))
    return out


def test_round_trip_split_by_split_and_an_empty_split_has_no_file(folder: Path) -> None:
    data = _data()
    assert sorted(os.listdir(folder)) == [
        "croissant.json",
        "dstore.json",
        "test.jsonl",
        "train.jsonl",
    ]
    assert _manifest(folder)["splits"]["empty"] == {"count": 0, "shards": []}
    with dstore.open(str(folder)) as ds:
        assert {s: ds[s].count for s in ds} == {"train": 20, "test": 10, "empty": 0}
        for split, fields in data.items():
            for name, want in fields.items():
                assert np.array_equal(ds[split][name][:], want), (split, name)
    assert main(["verify", str(folder)]) == 0


def test_files_swapped_in_the_manifest_are_refused_by_name(folder: Path) -> None:
    m = _manifest(folder)
    train, test = m["splits"]["train"]["shards"][0], m["splits"]["test"]["shards"][0]
    # the entries' files swapped, with their sizes and digests: only each file's own
    # schema tells which split it holds
    for key in ("file", "bytes", "sha256"):
        train[key], test[key] = test[key], train[key]
    _write_manifest(folder, m)
    with pytest.raises(DstoreError) as e:
        dstore.open(str(folder))
    assert "\n" not in str(e.value)
    assert "test.jsonl: its schema is not split 'train'" in str(e.value)


def test_a_manifest_naming_a_file_outside_the_folder_is_refused(folder: Path) -> None:
    outside = folder.parent / "elsewhere.jsonl"
    (folder / "train.jsonl").rename(outside)
    m = _manifest(folder)
    m["splits"]["train"]["shards"][0]["file"] = "../elsewhere.jsonl"
    _write_manifest(folder, m)
    with pytest.raises(DstoreError) as e:
        dstore.open(str(folder))
    assert "unreadable manifest" in str(e.value) and "'..'" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_changed_value_fails_the_read_and_the_check(folder: Path) -> None:
    path = folder / "test.jsonl"
    lines = path.read_bytes().split(b"\n")
    pixel = lines[2][len(b'{"x": [[[') :].split(b",", 1)[0]
    changed = str(int(pixel) ^ 1).encode()  # one pixel, its text as long: the size holds
    lines[2] = lines[2].replace(b"[[[" + pixel + b",", b"[[[" + changed + b",", 1)
    path.write_bytes(b"\n".join(lines))
    with (
        dstore.open(str(folder)) as ds,
        pytest.raises(DstoreError, match="split 'test', field 'x'"),
    ):
        ds["test"].read()
    assert main(["verify", str(folder)]) != 0


def test_overwrite_keeps_a_users_file_and_foreign_deletes_it(tmp_path: Path, folder: Path) -> None:
    notes = folder / "notes.txt"
    notes.write_text("mine", encoding="utf-8")
    with pytest.raises(OutputExistsError, match=r"notes\.txt"):
        dstore.save(_data(), str(folder), overwrite=True)
    assert notes.read_text(encoding="utf-8") == "mine"
    with dstore.open(str(folder)) as ds:
        assert ds["train"].count == 20
    dstore.save({"train": _data()["train"]}, str(folder), overwrite="foreign")
    assert folder.is_file()  # one split: one file


def test_splits_one_name_apart_in_case_are_refused_before_writing(tmp_path: Path) -> None:
    data = _data()
    out = tmp_path / "d.jsonl"
    with pytest.raises(SchemaError, match="splits train and Train would be stored as"):
        dstore.save({"train": data["train"], "Train": data["test"]}, str(out))
    assert os.listdir(tmp_path) == []


def test_an_append_writes_a_new_version_of_the_folder(folder: Path, tmp_path: Path) -> None:
    more = tmp_path / "more.npz"
    dstore.save({"test": _data()["test"]}, str(more))
    assert main(["convert", str(more), str(folder), "--append"]) == 0
    with dstore.open(str(folder)) as ds:
        assert {s: ds[s].count for s in ds} == {"train": 20, "test": 20, "empty": 0}
        assert np.array_equal(ds["test"]["x"][10:], _data()["test"]["x"])
    assert main(["log", str(folder)]) == 0
    assert main(["verify", str(folder)]) == 0
