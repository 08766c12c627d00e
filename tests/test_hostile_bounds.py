"""Issue #34's decoded sizes: what a file declares or expands to is bounded before it is
believed. An ``.npy`` member declaring more than it holds, a Parquet footer claiming
more rows than its pages, a dictionary page expanding to gigabytes, a JSON text larger
than is parsed at once: one line naming the file (and record), never an allocation that
follows the claim. Memory is measured in a child process under a limit of its own."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(dstore.__file__)))


def _tar(path: str, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _npy(arr: np.ndarray, shape: tuple[int, ...] | None = None) -> bytes:
    """``arr`` as ``.npy`` bytes whose header declares ``shape`` (its own if None)."""
    header = np.lib.format.header_data_from_array_1_0(arr)
    if shape is not None:
        header["shape"] = shape
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + arr.tobytes()


def _child(code: str, *args: str) -> str:
    """What ``python -c code *args`` prints (this checkout first on its path); it must
    exit 0. Risky reads run here under a memory limit of their own."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=_REPO),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


#: run first in a child: cap the address space 1 GiB above what the process holds
LIMIT_MEMORY = r"""
import os, resource
def limit_memory(extra=1 << 30):
    in_use = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (in_use + extra, resource.RLIM_INFINITY))
"""


# ------------------------------------------------------------- .npy declaring 10**12


@pytest.fixture
def npy_bomb_tar(tmp_path) -> tuple[str, list[np.ndarray]]:
    """A 10 kB tar of five ``.npy`` rows of a photo; the third declares ``(10**12,)``."""
    x, _ = photo_tiles(5, 8, seed=3)
    rows = [x[i, 0, :, 0].astype(np.float64) for i in range(5)]
    path = str(tmp_path / "rows.tar")
    _tar(
        path,
        [(f"{i:03d}.npy", _npy(r, (10**12,) if i == 2 else None)) for i, r in enumerate(rows)],
    )
    assert os.path.getsize(path) <= 10240
    return path, rows


def test_an_npy_member_declaring_more_than_it_holds_is_a_record_error(npy_bomb_tar):
    """Failed before: numpy's MemoryError (7.28 TiB asked for), which on_error="skip"
    did not skip. Now one line naming the file, sample and field, before allocating."""
    path, rows = npy_bomb_tar
    with dstore.open(path) as ds, pytest.raises(dstore.DstoreError) as raised:
        ds["data"]["npy"][2]
    line = str(raised.value)
    assert line == (
        f"{path}: sample '002', field 'npy': the .npy declares float64 (1000000000000,) "
        "(8,000,000,000,000 bytes) and holds 64 bytes of data"
    )
    pytest.importorskip("torch")
    loader = dstore.to_torch(path, split="data", on_error="skip")
    got = [r["npy"].numpy() for r in loader]
    assert len(got) == 4 and loader.skipped == 1
    for have, want in zip(got, [rows[i] for i in (0, 1, 3, 4)], strict=True):
        np.testing.assert_array_equal(have, want)
