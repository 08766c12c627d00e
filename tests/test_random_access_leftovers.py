"""A random-access copy left behind by a process killed outright (SIGKILL, the
out-of-memory killer) is removed by the next copy made -- only such a copy: named and
marked by dstore for a process that is gone, never a folder that merely looks like one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.readers.random_access import RandomAccessCopy

_MARK = ".dstore-random-access"


@pytest.fixture
def npz(tmp_path) -> str:
    x, y = photo_tiles(40, 16, seed=4)
    path = str(tmp_path / "tiles.npz")
    np.savez_compressed(path, x_train=x, y_train=y)  # deflated: read only in order
    return path


@pytest.fixture
def temp(tmp_path, monkeypatch) -> str:
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return str(folder)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _folder(temp: str, name: str, mark: str | None) -> str:
    path = os.path.join(temp, name)
    os.mkdir(path)
    with open(os.path.join(path, "data.npz"), "wb") as f:
        f.write(b"\0" * 4096)
    if mark is not None:
        with open(os.path.join(path, _MARK), "w", encoding="utf-8") as f:
            f.write(mark + "\n")
    return path


def test_a_killed_processs_copy_is_removed_by_the_next_and_nothing_else(npz, temp) -> None:
    dead = _dead_pid()
    host = socket.gethostname()
    gone = _folder(temp, f"dstore-random-access-{dead}-abc", f"{dead} {host}")
    kept = [
        _folder(temp, f"dstore-random-access-{dead}-nomark", None),  # not marked by dstore
        _folder(temp, f"dstore-random-access-{dead}-other", f"{dead + 1} {host}"),  # not its pid
        _folder(temp, f"dstore-random-access-{dead}-host", f"{dead} {host}-elsewhere"),
        _folder(temp, f"dstore-random-access-{os.getpid()}-live", f"{os.getpid()} {host}"),
        _folder(temp, f"dstore-random-access-x{dead}-odd", f"{dead} {host}"),  # not its name
        _folder(temp, f"mine-{dead}", f"{dead} {host}"),
    ]
    fifo = _folder(temp, f"dstore-random-access-{dead}-fifo", None)
    os.mkfifo(os.path.join(fifo, _MARK))  # read, it would block: never opened
    kept.append(fifo)
    copy = RandomAccessCopy(npz, "npz", "a test")
    assert copy.path is not None and copy.folder.startswith(temp)
    assert not os.path.exists(gone)
    assert all(os.path.isdir(k) for k in kept)
    with open(os.path.join(copy.folder, _MARK), encoding="utf-8") as f:
        assert f.read().strip() == f"{os.getpid()} {host}"
    with dstore.open(copy.path) as ds:
        assert np.array_equal(ds["train"]["x"][:], np.load(npz)["x_train"])
    copy.close()
    assert not os.path.exists(copy.folder)


def test_a_copy_left_by_a_sigkilled_reader_goes_with_the_next_one(npz, temp) -> None:
    """A real reader killed with SIGKILL while its global shuffle holds the copy."""
    child = textwrap.dedent(
        """
        import os, sys, tempfile
        tempfile.tempdir = sys.argv[2]
        from dstore.readers.random_access import RandomAccessCopy
        copy = RandomAccessCopy(sys.argv[1], "npz", "a test")
        print(copy.folder, flush=True)
        sys.stdin.read()
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", child, npz, temp],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        left = proc.stdout.readline().strip()
        assert os.path.isdir(left)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.path.isdir(left)  # nothing could remove it
    copy = RandomAccessCopy(npz, "npz", "a test")
    assert not os.path.exists(left)
    copy.close()
    assert os.listdir(temp) == []
