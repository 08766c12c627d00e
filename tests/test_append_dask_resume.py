"""Appends on Dask and appends resumed (issue #37): the new shards are the bytes a local,
uninterrupted append writes."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dstore
from dstore.testing import cli_command, file_digests

# slow: a Dask cluster of worker processes, and appends interrupted in child processes
pytestmark = pytest.mark.slow

OPTIONS = {"shard_mb": "0.25", "png_level": "9"}  # many slow shards: time to interrupt


def _shards(dst: str) -> dict[str, str]:
    """Digests of the dataset's shards and indexes (the manifests hold times: left out)."""
    return {
        name: digest
        for name, digest in file_digests(dst).items()
        if name != "dstore.json" and not name.startswith(".dstore-versions")
    }


@pytest.fixture
def grown(tmp_path, tiles) -> tuple[str, str]:
    """A TFRecord dataset of 20 tiles and an npz of 600 more (a key per record)."""
    x, _ = tiles
    base, more = str(tmp_path / "base.npz"), str(tmp_path / "more.npz")
    dstore.save({"train": {"x": x[:20], "key": np.arange(20)}}, base)
    many = np.tile(x, (10, 1, 1, 1))[:600]
    dstore.save({"train": {"x": many, "key": np.arange(600) + 1000}}, more)
    dst = str(tmp_path / "d.tfrecords")
    dstore.convert(base, dst, options=OPTIONS)
    return dst, more


def _reference(tmp_path, dst: str, more: str) -> dict[str, str]:
    ref = str(tmp_path / "ref.tfrecords")
    shutil.copytree(dst, ref)
    dstore.convert(more, ref, append=True)
    return _shards(ref)


def _keys(dst: str) -> list[int]:
    with dstore.open(dst) as ds:
        return [int(k) for k in ds["train"]["key"][:]]


def test_an_append_on_dask_writes_the_shards_of_a_local_one(tmp_path, grown, client):
    dst, more = grown
    reference = _reference(tmp_path, dst, more)
    report = dstore.convert(more, dst, append=True, client=client)
    assert report.version == 2
    assert _shards(dst) == reference
    assert _keys(dst) == [*range(20), *range(1000, 1600)]
    assert dstore.api.check(dst).ok


def test_an_interrupted_append_resumes_with_its_finished_shards(tmp_path, grown):
    dst, more = grown
    reference = _reference(tmp_path, dst, more)
    proc = subprocess.Popen(  # SIGINT raises KeyboardInterrupt even in a background job
        cli_command("convert", more, dst, "--append"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pending = os.path.join(dst, ".dstore-versions", "pending-*", "dstore.journal")
    while proc.poll() is None:  # two shards finished: measured from the append's journal
        journals = glob.glob(pending)
        if journals:
            with open(journals[0]) as f:
                if len(f.read().splitlines()) > 2:
                    break
        time.sleep(0.01)
    assert proc.poll() is None, "the append finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "--resume" in err, err
    assert _keys(dst) == list(range(20))  # version 1 still, nothing of the append visible
    res = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", more, dst, "--append", "--resume"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert "resumed:" in res.stdout and "shards kept" in res.stdout, res.stdout
    assert _shards(dst) == reference
    assert _keys(dst) == [*range(20), *range(1000, 1600)]
    assert glob.glob(os.path.join(dst, ".dstore-versions", "pending-*")) == []
