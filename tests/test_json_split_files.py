"""JSON Lines of several splits: a folder of one file per split, its manifest checked
against the files (never trusted), replaced only when it holds nothing of the user's;
then as a hostile user hands it over: its manifest forged or damaged, its files
replaced by links, folders, FIFOs or another file; each refused with one line naming
the file or split, nothing read outside it."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import dstore
from dstore.cli import main
from dstore.demo import photo_tiles
from dstore.errors import DstoreError, OutputExistsError, SchemaError
from dstore.model.schema import Schema


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


def _refused(folder: Path, *words: str) -> str:
    """The one-line error opening ``folder`` gives, holding each of ``words``; the CLI
    exits non-zero on it."""
    with pytest.raises(DstoreError) as e:
        dstore.open(str(folder))
    message = str(e.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    assert main(["info", str(folder)]) != 0
    return message


def test_a_dataset_written_under_a_plain_name_opens_by_its_manifest(tmp_path: Path) -> None:
    out = tmp_path / "outdir"  # no extension: the format is named when writing
    dstore.save(_data(), str(out), format="jsonl")
    with dstore.open(str(out)) as ds:
        assert list(ds) == ["train", "test", "empty"]
        for split, fields in _data().items():
            for name, want in fields.items():
                assert np.array_equal(ds[split][name][:], want), (split, name)
    assert main(["verify", str(out)]) == 0


def test_a_split_file_linked_out_of_the_folder_is_refused_as_a_read(folder: Path) -> None:
    outside = folder.parent / "outside.jsonl"
    shutil.move(folder / "train.jsonl", outside)
    os.symlink(outside, folder / "train.jsonl")
    message = _refused(folder, "'train.jsonl'", "outside", "follow_links=True reads it")
    assert "write" not in message
    with dstore.open(str(folder), follow_links=True) as ds:  # as the message says
        assert np.array_equal(ds["train"]["x"][:], _data()["train"]["x"])


@pytest.mark.parametrize("kind", ["folder", "fifo"])
@pytest.mark.parametrize("name", ["train.jsonl", "dstore.json"])
def test_a_split_file_or_manifest_not_a_regular_file_is_named_as_such(
    folder: Path, kind: str, name: str
) -> None:
    # a FIFO manifest blocked dstore.open for ever (the folder was read whatever it held)
    path = folder / name
    path.unlink()
    if kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)  # opened, it would block for ever
    message = _refused(folder, name, "not a regular file")
    assert "no such file" not in message


def test_a_manifest_of_a_newer_layout_or_a_compression_is_refused(folder: Path) -> None:
    m = _manifest(folder)
    _write_manifest(folder, {**m, "format_version": 2})
    _refused(folder, "dstore.json", "format_version 2")
    _write_manifest(folder, {**m, "compression": "gzip"})
    _refused(folder, "dstore.json", "compression 'gzip'")


def test_manifest_counts_that_are_not_the_schemas_are_refused(folder: Path) -> None:
    m = _manifest(folder)
    m["splits"]["train"]["count"] = 5
    m["splits"]["train"]["shards"][0]["records"] = 5  # adds up, but the file holds 20
    _write_manifest(folder, m)
    _refused(folder, "dstore.json", "split 'train'", "5 records")


def test_a_split_file_of_another_size_than_listed_is_refused_at_open(folder: Path) -> None:
    # another dataset's file carrying this one's schema line: its values are read at
    # random (their checksums are checked only by a whole read)
    path = folder / "test.jsonl"
    lines = path.read_bytes().rstrip(b"\n").split(b"\n")
    first = json.loads(lines[0])
    first["y"] = [v + 100 for v in first["y"]]  # one label: three digits, not one
    lines[0] = json.dumps(first).encode()
    path.write_bytes(b"\n".join(lines) + b"\n")
    _refused(folder, "test.jsonl", "bytes", "manifest")


@pytest.mark.parametrize(
    "text", ['{"format": "dstore-jsonl", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "{nope"]
)
def test_a_folder_whose_manifest_does_not_load_says_why(folder: Path, text: str) -> None:
    (folder / "dstore.json").write_text(text, encoding="utf-8")
    message = _refused(folder, "dstore.json")
    assert "no such file" not in message


def test_a_folder_of_another_formats_manifest_is_refused(folder: Path) -> None:
    _write_manifest(folder, {**_manifest(folder), "format": "dstore-parquet"})
    _refused(folder, "dstore.json", "dstore-parquet")


def test_many_splits_are_written_holding_one_file_open(tmp_path: Path) -> None:
    """300 splits under a limit of 200 open files (macOS's default is 256). Failed before:
    every split's file stayed open until the end ('Too many open files')."""
    out = str(tmp_path / "many.jsonl")
    code = textwrap.dedent(
        f"""
        import resource
        import dstore
        from dstore.demo import photo_tiles
        x, y = photo_tiles(300, 8, seed=5)
        resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))
        dstore.save({{f"s{{i}}": {{"x": x[i : i + 1], "y": y[i : i + 1]}} for i in range(300)}}, {out!r})
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    x, _ = photo_tiles(300, 8, seed=5)
    with dstore.open(out) as ds:
        assert list(ds) == [f"s{i}" for i in range(300)]
        for i in range(300):
            assert np.array_equal(ds[f"s{i}"]["x"][:], x[i : i + 1]), i
    assert len(os.listdir(out)) == 302  # a file per split, the manifest and the card


def test_a_manifest_linked_out_of_the_folder_is_not_read(folder: Path) -> None:
    outside = folder.parent / "elsewhere.json"
    shutil.move(folder / "dstore.json", outside)
    os.symlink(outside, folder / "dstore.json")
    _refused(folder, "'dstore.json'", "outside")


def test_a_split_listing_a_second_file_is_refused(folder: Path) -> None:
    # train.jsonl's records twice, as two files of one split: the counts add up, the
    # schema says 40 records (refused before too, as a file whose schema is not the split's)
    shutil.copy(folder / "train.jsonl", folder / "again.jsonl")
    m = _manifest(folder)
    train = m["splits"]["train"]
    train["shards"].append({**train["shards"][0], "file": "again.jsonl"})
    train["count"] = 40
    schema = Schema.from_json(m["schema"])
    schema.splits["train"].count = 40
    m["schema"] = schema.to_json()  # its digest made anew, as a forger can
    _write_manifest(folder, m)
    _refused(folder, "dstore.json", "split 'train' lists 2 files")


def test_overwrite_of_a_folder_whose_manifest_does_not_load_is_refused_as_not_a_dataset(
    folder: Path,
) -> None:
    m = _manifest(folder)
    m["splits"]["train"]["count"] = 3  # its file's 20 records do not add up to it
    _write_manifest(folder, m)
    with pytest.raises(DstoreError) as e:
        dstore.save(_data(), str(folder), overwrite=True)
    # was: "holds files jsonl did not write ('croissant.json', 'dstore.json', ...)"
    assert "is not a dataset in jsonl format" in str(e.value)
    assert sorted(os.listdir(folder)) == [
        "croissant.json",
        "dstore.json",
        "test.jsonl",
        "train.jsonl",
    ]


def test_a_field_named_as_the_schema_member_is_refused_leaving_nothing_open(
    tmp_path: Path,
) -> None:
    x, y = photo_tiles(4, 8, seed=5)
    data = {s: {"x": x[i : i + 2], "dstore:schema": y[i : i + 2]} for s, i in [("a", 0), ("b", 2)]}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(DstoreError, match="split 'a', field 'dstore:schema'"):
            dstore.save(data, str(tmp_path / "f.jsonl"))
        gc.collect()
    assert not [w for w in seen if issubclass(w.category, ResourceWarning)]  # was: unclosed file
    assert os.listdir(tmp_path) == []


def test_overwrite_keeps_a_users_file_in_a_folder_named_as_dstores_versions(
    folder: Path,
) -> None:
    # other formats keep older versions there; a JSON Lines folder never writes one
    mine = folder / ".dstore-versions" / "mine.txt"
    mine.parent.mkdir()
    mine.write_text("mine", encoding="utf-8")
    with pytest.raises(DstoreError, match=r"\.dstore-versions/mine\.txt"):
        dstore.save(_data(), str(folder), overwrite=True)  # was: deleted without a word
    assert mine.read_text(encoding="utf-8") == "mine"
    dstore.save(_data(), str(folder), overwrite="foreign")
    assert not mine.parent.exists()
