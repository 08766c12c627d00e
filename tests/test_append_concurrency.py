"""Two appenders at once (issue #37): both land, each exactly once, in some order; a
second appender on this machine waits for the first and says so on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import dstore
from dstore.locking import append_lock
from dstore.testing import cli_command

FORMATS = {"tfrecord": ".tfrecords", "zarr": ".zarr", "npz": ".npz", "webdataset": ".wds"}


def _sources(tmp_path, tiles, n: int = 3) -> list[str]:
    """``n`` sources of 20 tiles each, a key per record saying which source and which record."""
    x, _ = tiles
    out = []
    for i in range(n):
        path = str(tmp_path / f"s{i}.npz")
        keys = np.arange(20, dtype=np.int64) + 1000 * i
        dstore.save({"train": {"x": np.roll(x[:20], i, axis=0), "key": keys}}, path)
        out.append(path)
    return out


def _keys(dst: str) -> list[int]:
    with dstore.open(dst) as ds:
        return [int(k) for k in ds["train"]["key"][:]]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_two_appenders_at_once_both_land_once(tmp_path, tiles, fmt):
    first, a, b = _sources(tmp_path, tiles)
    dst = str(tmp_path / f"d{FORMATS[fmt]}")
    dstore.convert(first, dst, to=fmt)
    procs = [
        subprocess.Popen(
            cli_command("convert", src, dst, "--append"), stderr=subprocess.PIPE, text=True
        )
        for src in (a, b)
    ]
    errs = [p.communicate()[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    keys = _keys(dst)
    assert keys[:20] == list(range(20))
    rest = keys[20:]
    assert sorted(rest) == sorted([*range(1000, 1020), *range(2000, 2020)])
    # each source's records stay together, in order: one append each
    assert rest in (
        [*range(1000, 1020), *range(2000, 2020)],
        [*range(2000, 2020), *range(1000, 1020)],
    )
    log = dstore.log(dst).to_json()
    assert [v["version"] for v in log] == [1, 2, 3]
    assert {os.path.basename(v["source"]) for v in log[1:]} == {"s1.npz", "s2.npz"}
    assert dstore.api.check(dst).ok
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".")]
    assert leftovers == []


def test_a_second_appender_waits_and_says_so(tmp_path, tiles):
    first, a, _ = _sources(tmp_path, tiles)
    dst = str(tmp_path / "d.tfrecords")
    dstore.convert(first, dst)
    with append_lock(dst):
        proc = subprocess.Popen(
            cli_command("convert", a, dst, "--append"), stderr=subprocess.PIPE, text=True
        )
        assert proc.stderr is not None
        line = proc.stderr.readline()  # printed when it starts to wait
        assert "another dstore process" in line and "waiting for it to finish" in line, line
        time.sleep(0.5)
        assert proc.poll() is None and len(_keys(dst)) == 20  # still waiting, nothing written
    rest = proc.communicate()[1]
    assert proc.returncode == 0, rest
    assert _keys(dst) == [*range(20), *range(1000, 1020)]


def test_a_lock_left_by_a_killed_appender_does_not_block(tmp_path, tiles):
    """The lock is the kernel's: a killed holder's file stays, and is taken at once."""
    first, a, _ = _sources(tmp_path, tiles)
    dst = str(tmp_path / "d.zarr")
    dstore.convert(first, dst)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from dstore.locking import append_lock\n"
            "with append_lock(sys.argv[1]):\n print('held', flush=True); time.sleep(60)",
            dst,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    holder.stdout.close()
    assert os.path.exists(tmp_path / ".d.zarr.dstore-append")  # left by the killed holder
    dstore.convert(a, dst, append=True)
    assert _keys(dst) == [*range(20), *range(1000, 1020)]
    assert not os.path.exists(tmp_path / ".d.zarr.dstore-append")
