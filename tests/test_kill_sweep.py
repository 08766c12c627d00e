"""SIGKILL at random moments of a conversion, for every format, fresh and over an old output.

After each kill: the destination is absent (fresh) or still the previous
complete output (--overwrite), the input is unchanged, and anything left is a
recognisable dstore temporary that the next run removes. The counts go to the
issue note: kills tried, and leftovers found after the next run (must be 0).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import dstore
from dstore.testing import file_digests

KILLS_PER_CASE = 4
OPTIONS = {
    ".npz": ["-o", "level=9"],
    ".zarr": ["-o", "clevel=9"],
    ".h5": ["-o", "level=9"],
    ".tfrecords": ["-o", "png_level=9", "-o", "shard_mb=2"],
}



@pytest.mark.parametrize("ext", list(OPTIONS))
@pytest.mark.parametrize("over_old", [False, True], ids=["fresh", "overwrite"])
def test_sigkill_at_random_moments(tmp_path, tiles, ext, over_old):
    if ext == ".tfrecords":
        pytest.importorskip("imagecodecs")
    if ext == ".h5":
        pytest.importorskip("h5py")
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(src, x_train=np.tile(x, (30, 1, 1, 1)), y_train=np.tile(y, (30, 1)))
    src_sha = file_digests(src)
    dst = str(tmp_path / f"out{ext}")
    cmd = [sys.executable, "-m", "dstore.cli", "convert", src, dst, *OPTIONS[ext], "--overwrite"]
    t = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    full = time.monotonic() - t
    old_sha = file_digests(dst)
    rng = random.Random(f"{ext}{over_old}")
    kills = 0
    for _ in range(KILLS_PER_CASE):
        if not over_old:
            dstore.output.remove_path(dst)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, max(0.4, full * 0.9)))  # ~0.3 s: the interpreter's start-up
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        assert file_digests(src) == src_sha, "the input changed"
        if over_old:
            assert os.path.exists(dst) and file_digests(dst) == old_sha, "the old output was damaged"
        elif proc.returncode != 0:
            assert not os.path.exists(dst), "a killed run left a destination"
        others = [f for f in os.listdir(tmp_path) if f not in ("data.npz", f"out{ext}")]
        assert all(f.startswith(f".out{ext}.dstore-") for f in others), others
    print(f"\nkill sweep {ext} {'overwrite' if over_old else 'fresh'}: {kills} of {KILLS_PER_CASE} runs killed")
    assert kills >= KILLS_PER_CASE // 2, f"only {kills} runs were still going when killed"
    # the next run cleans every leftover and succeeds
    subprocess.run(cmd, check=True, capture_output=True)
    assert sorted(os.listdir(tmp_path)) == ["data.npz", f"out{ext}"]
    assert dstore.verify(src, dst).ok
