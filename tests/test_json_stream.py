"""The JSON and JSON Lines files dstore writes read back a batch at a time: every value
as written, any range of records, memory that of a batch whatever the file's size; a
file edited by hand is read whole as before, and a damaged record is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.codecs.json.split_files import SplitFilesReader
from dstore.codecs.json.stream import StreamedJsonReader
from dstore.demo import photo_tiles
from dstore.errors import DstoreError


def _data(n: int = 50) -> dict:
    x, y = photo_tiles(n, 16, seed=2)
    names = np.array([f'tile {i}\n"quoted", é' for i in range(n)])  # newlines are escaped
    return {
        "train": {"x": x[: n - 12], "y": y[: n - 12], "name": names[: n - 12]},
        "test": {"x": x[n - 12 :], "y": y[n - 12 :], "name": names[n - 12 :]},
        "empty": {"x": x[:0], "y": y[:0], "name": names[:0]},
    }


@pytest.mark.parametrize("ext", ["json", "jsonl"])
def test_dstore_json_reads_a_batch_at_a_time(tmp_path, ext):
    data = _data()
    path = str(tmp_path / f"d.{ext}")
    dstore.save(data, path)
    with dstore.open(path) as ds:
        if ext == "json":
            assert isinstance(ds.reader, StreamedJsonReader)
        else:  # several splits: a folder of one file each, each streamed (none if empty)
            assert isinstance(ds.reader, SplitFilesReader)
            assert sorted(os.listdir(path)) == [
                "croissant.json",
                "dstore.json",
                "test.jsonl",
                "train.jsonl",
            ]
            assert {s: type(r) for s, (r,) in ds.reader.shards.items()} == {
                "train": StreamedJsonReader,
                "test": StreamedJsonReader,
            }
        assert {s: ds[s].count for s in ds} == {"train": 38, "test": 12, "empty": 0}
        for split, fields in data.items():
            got = ds[split].read()
            for name, want in fields.items():
                values = got[name] if name != "name" else got[name].to_str_list()
                assert np.array_equal(np.asarray(values), want), (split, name)
        # any range, in batches of any size
        assert np.array_equal(ds["train"]["x"][5:17], data["train"]["x"][5:17])
        parts = list(ds["train"].iter_batches(start=3, stop=30, batch_rows=7))
        assert [len(p["y"]) for p in parts] == [7, 7, 7, 6]
        assert np.array_equal(np.concatenate([p["x"] for p in parts]), data["train"]["x"][3:30])
    dstore.convert(path, str(tmp_path / "back.npz"))
    assert dstore.verify(path, str(tmp_path / "back.npz")).ok


@pytest.mark.parametrize("ext", ["json", "jsonl"])
def test_an_edited_file_is_read_whole(tmp_path, ext):
    """Pretty-printed (records over several lines): not dstore's layout, read as any JSON."""
    data = _data(20)
    path = str(tmp_path / f"d.{ext}")
    dstore.save(data, path)
    if ext == "json":
        with open(path) as f:
            doc = json.load(f)
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
    else:
        with open(os.path.join(path, "train.jsonl")) as f:
            lines = f.read().splitlines()
        with open(os.path.join(path, "train.jsonl"), "w") as f:
            f.write("\n".join([lines[0], "", *lines[1:]]) + "\n")  # a blank line
        # its folder's manifest lists it at another size: refused there, read alone
        with pytest.raises(DstoreError, match=r"train\.jsonl: .* bytes, the manifest lists"):
            dstore.open(path)
        path = os.path.join(path, "train.jsonl")
    with dstore.open(path) as ds:
        assert not isinstance(ds.reader, StreamedJsonReader)
        assert np.array_equal(ds["train"]["x"][:], data["train"]["x"])


def test_a_damaged_record_is_one_line(tmp_path):
    """The damaged file named, with the record: a split's own file in a folder of several."""
    path = str(tmp_path / "d.jsonl")
    dstore.save(_data(20), path)
    train = os.path.join(path, "train.jsonl")
    with open(train, "rb") as f:
        lines = f.read().split(b"\n")
    # the fifth record cut short (blanks where its end was: the file's size holds)
    half = len(lines[4]) // 2
    lines[4] = lines[4][:half] + b" " * (len(lines[4]) - half)
    with open(train, "wb") as f:
        f.write(b"\n".join(lines))
    with dstore.open(path) as ds, pytest.raises(DstoreError) as e:
        ds["train"].read()
    assert "\n" not in str(e.value) and f"{train}, record 4: not valid JSON" in str(e.value)


# VmHWM, not ru_maxrss: after fork + exec, ru_maxrss keeps the parent's peak
_READ_PEAK = """
import sys
import dstore
with dstore.open(sys.argv[1]) as ds:
    n = sum(len(b["x"]) for s in ds for b in ds[s].iter_batches())
peak = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")).split()[1]
print(n, int(peak) // 1024)
"""


@pytest.mark.slow  # writes a 70 MB JSON document (~20 s)
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc")
def test_reading_a_large_document_keeps_memory_bounded(tmp_path):
    """1,500 tiles of 64x64x3 (18 MB of pixels, a 70 MB document): parsed whole, every
    number is a Python object (over a gigabyte); read a batch at a time, the reader's
    peak stays that of a batch."""
    x, y = photo_tiles(1500, 64, seed=3)
    path = str(tmp_path / "tiles.json")
    dstore.save({"train": {"x": x, "y": y}}, path)
    assert os.path.getsize(path) > 50e6
    proc = subprocess.run(
        [sys.executable, "-c", _READ_PEAK, path], capture_output=True, text=True, check=True
    )
    n, peak_mb = map(int, proc.stdout.split())
    assert n == 1500 and peak_mb < 400, peak_mb
