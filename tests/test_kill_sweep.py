"""SIGKILL at random moments of a conversion written by one writer (npz, zarr, HDF5),
fresh and over an old output; sharded formats are killed by the sharded suite
(``dstore.testing.ShardedCodecSuite``: at random progress, over an old output).

The moments are points of the run's own progress (the ``stepped`` fixture: the
child stops at each batch): the child
is killed while stopped there, or at a random instant after it was let go on,
before it can reach its next step. So every kill lands mid-run, however busy
the machine is, and a kill after the last step lands in the final commit.

After each kill: the destination is absent (fresh) or still the previous
complete output (--overwrite), the input is unchanged, and anything left is a
recognisable dstore temporary that the next run removes.
"""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import pytest

import dstore
from dstore.testing import file_digests

# The whole module is slow: SIGKILLs conversions at random moments, every format (~90 s); `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow

KILLS_PER_CASE = 4
BATCH_BYTES = 256 * 1024  # ~25 batches of tiles: that many moments to choose from
OPTIONS = {
    ".npz": ["-o", "level=9"],
    ".zarr": ["-o", "clevel=9"],
    ".h5": ["-o", "level=9"],
}
# Sharded formats: the sharded suite's kill tests (dstore.testing.ShardedCodecSuite)


@pytest.mark.parametrize("ext", list(OPTIONS))
@pytest.mark.parametrize("over_old", [False, True], ids=["fresh", "overwrite"])
def test_sigkill_at_random_moments(tmp_path, tiles, stepped, ext, over_old):
    if ext == ".h5":
        pytest.importorskip("h5py")
    x, y = tiles
    src, old_src = str(tmp_path / "data.npz"), str(tmp_path / "old.npz")
    np.savez(src, x_train=np.tile(x, (10, 1, 1, 1)), y_train=np.tile(y, (10, 1)))
    np.savez(old_src, x_train=x[::-1], y_train=y[::-1])  # the old output holds other data
    src_sha = file_digests(src)
    dst = str(tmp_path / f"out{ext}")
    argv = ["convert", src, dst, *OPTIONS[ext], "--overwrite"]
    full = stepped(argv, BATCH_BYTES)
    code, err = full.run_to_end()
    assert code == 0, err
    steps = full.steps
    assert steps >= 3, f"only {steps} steps to kill at"
    dstore.convert(
        old_src, dst, overwrite=True, options=dict(o.split("=") for o in OPTIONS[ext][1::2])
    )
    old_sha = file_digests(dst)
    listed = sorted(["data.npz", "old.npz", f"out{ext}"])
    rng = random.Random(f"{ext}{over_old}")
    kills = 0
    # KILLS_PER_CASE kills mid-run, then one after the last step (during the commit or after it)
    for at in [rng.randrange(1, steps) for _ in range(KILLS_PER_CASE)] + [steps]:
        if not over_old:
            dstore.output.remove_path(dst)
        run = stepped(argv, BATCH_BYTES)
        for _ in range(at):
            assert run.next_step(), "the run ended before its step"
            if run.steps < at:
                run.go()
        if at == steps or rng.random() < 0.5:
            run.go()  # killed somewhere on its way to the next step (which it cannot pass)
            time.sleep(rng.uniform(0, 0.3))  # only where the kill lands, not whether
        mid_run = at < steps
        run.signal(signal.SIGKILL)
        code, _ = run.finish()
        if mid_run:
            assert code == -signal.SIGKILL
            kills += 1
        assert file_digests(src) == src_sha, "the input changed"
        if over_old and mid_run:
            assert file_digests(dst) == old_sha, "the old output was damaged"
        elif over_old or os.path.exists(dst):  # the late kill: the old or the complete new one
            assert file_digests(dst) == old_sha or dstore.verify(src, dst).ok
        else:
            assert not os.path.exists(dst), "a killed run left a destination"
        others = [f for f in os.listdir(tmp_path) if f not in listed]
        assert all(f.startswith(f".out{ext}.dstore-") for f in others), others
    print(
        f"\nkill sweep {ext} {'overwrite' if over_old else 'fresh'}: {kills} runs killed mid-run "
        f"at steps of {steps}, then one after the last step"
    )
    assert kills == KILLS_PER_CASE
    # the next run cleans every leftover and succeeds
    full = stepped(argv)
    code, err = full.finish()
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == listed
    assert dstore.verify(src, dst).ok
