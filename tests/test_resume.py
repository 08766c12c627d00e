"""--resume: an interrupted sharded conversion finishes with the bytes of an uninterrupted run."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dstore.testing import file_digests

pytest.importorskip("imagecodecs")

OPTIONS = ["-o", "shard_mb=1", "-o", "png_level=9"]  # ~20 slow shards: time to interrupt


@pytest.fixture
def source(tmp_path, tiles) -> str:
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (30, 1, 1, 1)), y_train=np.tile(y, (30, 1)),
             x_test=x, y_test=y)
    return src


@pytest.fixture
def reference(tmp_path_factory, source) -> dict[str, str]:
    ref = str(tmp_path_factory.mktemp("ref") / "ref.tfrecords")
    subprocess.run([sys.executable, "-m", "dstore.cli", "convert", source, ref, *OPTIONS],
                   check=True, capture_output=True)
    return file_digests(ref)


def start_and_stop_after(src: str, dst: str, shards: int, sig: int, *extra: str) -> tuple[int, str]:
    """Start a conversion and signal it once ``shards`` shards are in its journal."""
    proc = subprocess.Popen([sys.executable, "-m", "dstore.cli", "convert", src, dst, *OPTIONS, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent, base = os.path.split(dst)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        journals = glob.glob(os.path.join(parent, f".{base}.dstore-tmp-*", "dstore.journal"))
        if journals:
            with open(journals[0]) as f:
                if len(f.read().splitlines()) > shards:  # header + finished shards
                    break
        time.sleep(0.01)
    assert proc.poll() is None, "conversion finished before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def resume(src: str, dst: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dstore.cli", "convert", src, dst, *OPTIONS, "--resume", *extra],
                          capture_output=True, text=True, timeout=300)


def test_resume_after_sigkill_is_byte_identical(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 3, signal.SIGKILL)
    assert not os.path.exists(dst)
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    kept = int(res.stdout.split("resumed: ")[1].split(" of ")[0])
    assert kept >= 3
    assert file_digests(dst) == reference
    assert sorted(os.listdir(tmp_path)) == ["data.npz", "out.tfrecords"]


def test_resume_survives_a_second_interruption(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 2, signal.SIGKILL)
    start_and_stop_after(source, dst, 5, signal.SIGKILL, "--resume")  # the resumed run is killed too
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    kept = int(res.stdout.split("resumed: ")[1].split(" of ")[0])
    assert kept >= 5  # shards of both earlier runs were kept
    assert file_digests(dst) == reference


def test_sigint_keeps_finished_shards_for_resume(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    returncode, err = start_and_stop_after(source, dst, 2, signal.SIGINT)
    assert returncode == 130
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--resume" in lines[0] and "shards are kept" in lines[0], lines
    assert not os.path.exists(dst)
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    assert file_digests(dst) == reference


def test_resume_rewrites_a_damaged_kept_shard(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 2, signal.SIGKILL)
    (tmp,) = glob.glob(str(tmp_path / ".out.tfrecords.dstore-tmp-*"))
    with open(os.path.join(tmp, "dstore.journal")) as f:
        first = json.loads(f.read().splitlines()[1])["file"]
    with open(os.path.join(tmp, first), "r+b") as f:
        f.seek(100)
        f.write(b"\xff\x00\xff")
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    assert file_digests(dst) == reference


def test_resume_refuses_changed_options_and_keeps_the_work(tmp_path, source):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 1, signal.SIGKILL)
    res = subprocess.run([sys.executable, "-m", "dstore.cli", "convert", source, dst,
                          "-o", "shard_mb=2", "-o", "png_level=9", "--resume"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot resume" in lines[0] and "codec" in lines[0], lines
    assert glob.glob(str(tmp_path / ".out.tfrecords.dstore-tmp-*")), "the interrupted work must be kept"
    assert not os.path.exists(dst)


def test_resume_without_leftovers_is_a_plain_run(tmp_path, label_maker_npz):
    import dstore

    dst = str(tmp_path / "out.tfrecords")
    report = dstore.convert(label_maker_npz, dst, resume=True)
    assert report.shards is not None and report.shards.kept == 0
    assert dstore.api.check(dst).ok


def test_resume_needs_a_sharded_format(tmp_path, label_maker_npz):
    from dstore.cli import main

    assert main(["convert", label_maker_npz, str(tmp_path / "out.npz"), "--resume"]) == 2
    assert not os.path.exists(tmp_path / "out.npz")
