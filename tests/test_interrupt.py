"""Ctrl-C during a conversion: exit 130, one line, nothing left behind, input untouched."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

_SIGNALS = {
    "SIGINT": (signal.SIGINT, 130, "interrupted: no output was left behind"),
    # systemd, timeout and Kubernetes stop a process with SIGTERM: it left the lock and
    # the temporary output to the next run (issue #26)
    "SIGTERM": (signal.SIGTERM, 143, "terminated (SIGTERM): no output was left behind"),
}


@pytest.mark.parametrize("sig", list(_SIGNALS))
def test_sigint_and_sigterm_leave_nothing(tmp_path, tiles, stepped, sig):
    """An npz output; a sharded one interrupted inside its first shard is the sharded
    suite's (test_a_signal_inside_the_first_shard_leaves_nothing)."""
    number, exit_code, message = _SIGNALS[sig]
    dst_name = "out.npz"
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (10, 1, 1, 1)), y_train=np.tile(y, (10, 1)))
    with open(src, "rb") as f:
        before = hashlib.sha256(f.read()).hexdigest()
    run = stepped(
        [
            "convert",
            src,
            str(tmp_path / dst_name),
            "-o",
            "level=9",
        ],
        1 << 20,
    )
    # stopped at its first step: mid-write (the first batch written), whatever the
    # machine's load
    assert run.next_step(), "the conversion ended without a step"
    assert any(".dstore-tmp-" in f for f in os.listdir(tmp_path))
    assert any(f.endswith(".dstore-lock") for f in os.listdir(tmp_path))
    run.signal(number)
    code, err = run.finish()
    assert code == exit_code, err
    assert [ln for ln in err.splitlines() if ln.strip()] == [message]
    assert sorted(os.listdir(tmp_path)) == ["data.npz"]
    with open(src, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == before


def test_killed_run_leftovers_are_cleaned_by_the_next_run(tmp_path, label_maker_npz):
    import dstore

    dead = 2**22 + 12345  # beyond the default pid_max: no such process
    out = tmp_path / "out.npz"
    (tmp_path / f".out.npz.dstore-tmp-{dead}-abcd1234").write_bytes(b"partial")
    (tmp_path / ".out.npz.dstore-lock").write_text(str(dead))
    dstore.convert(label_maker_npz, str(out))
    assert sorted(os.listdir(tmp_path)) == ["data.npz", "out.npz"]


def test_concurrent_writers_one_wins(tmp_path, tiles, stepped):
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (10, 1, 1, 1)), y_train=np.tile(y, (10, 1)))
    dst = str(tmp_path / "out.npz")
    first = stepped(["convert", src, dst, "-o", "level=9"], 1 << 20)
    assert first.next_step()  # stopped mid-write, holding the writer lock
    assert os.path.exists(tmp_path / ".out.npz.dstore-lock")
    second = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", src, dst],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    code, err = first.finish()
    assert code == 0, err
    assert second.returncode == 2
    assert (
        "another dstore process" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    )
    with np.load(dst) as z:
        np.testing.assert_array_equal(z["y_train"], np.tile(y, (10, 1)))
    assert sorted(os.listdir(tmp_path)) == ["data.npz", "out.npz"]


def test_sigkill_leaves_no_destination(tmp_path, tiles, stepped):
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (10, 1, 1, 1)), y_train=np.tile(y, (10, 1)))
    dst = tmp_path / "out.npz"
    run = stepped(["convert", src, str(dst), "-o", "level=9"], 1 << 20)
    assert run.next_step()
    run.signal(signal.SIGKILL)
    run.finish()
    assert not dst.exists()
    leftovers = [f for f in os.listdir(tmp_path) if f != "data.npz"]
    assert leftovers and all(f.startswith(".out.npz.dstore-") for f in leftovers)
    from dstore.cli import main

    assert main(["convert", src, str(dst)]) == 0  # the next run cleans up and succeeds
    assert sorted(os.listdir(tmp_path)) == ["data.npz", "out.npz"]


@pytest.mark.parametrize(
    ("dst", "option"),
    [
        ("out.npz", "compress=false"),
        ("out.tfrecords", "images=none"),
        ("out.zarr", "chunk_mb=8"),  # RLIMIT_FSIZE is per file: chunks must pass 2 MB
        ("out.h5", "compression=none"),  # refused before writing: see test_hdf5_space.py
        ("out.h5", "compression=gzip"),
    ],
)
def test_disk_full_is_one_clear_error(tmp_path, tiles, dst, option):
    """RLIMIT_FSIZE makes writes past 2 MB fail with EFBIG, as a full disk would fail them."""
    import resource

    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (10, 1, 1, 1)), y_train=np.tile(y, (10, 1)))

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))

    res = subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", src, str(tmp_path / dst), "-o", option],
        check=False,
        capture_output=True,
        text=True,
        preexec_fn=limit,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "too large" in lines[0].lower(), lines
    assert sorted(os.listdir(tmp_path)) == ["data.npz"]
