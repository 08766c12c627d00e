"""SIGKILL at random moments of appends (issue #37), on the formats that append in place.

The moments are points of the append's own progress (the ``stepped`` fixture: the
child stops after each batch and at the start of each TFRecord shard), killed there or
at a random instant after it was let go on. After each kill the dataset reads as the
version before or as the new one -- never anything between -- and ``verify`` passes;
after the next successful append nothing of the killed ones is left (no pending
folder, no lock file, no zarr temporaries or growing mark).
"""

from __future__ import annotations

import random
import signal
import time

import numpy as np
import pytest

import dstore
from dstore.testing import append_leftovers

# The whole module is slow: SIGKILLs appends at random moments, five formats (~1 min).
pytestmark = pytest.mark.slow

KILLS = 2
BATCH_BYTES = 128 * 1024  # ~10 tiles a batch: ~10 moments per append
EXT = {
    "tfrecord": ".tfrecords",
    "webdataset": ".wds",
    "parquet": ".parquet",
    "arrayrecord": ".arrayrecord",
    "zarr": ".zarr",
}
SMALL = {
    "tfrecord": ["-o", "shard_mb=0.3"],
    "webdataset": ["-o", "shard_mb=0.3"],
    "parquet": ["-o", "shard_mb=0.3"],
    "arrayrecord": ["-o", "shard_mb=0.3"],
    "zarr": ["-o", "chunk_mb=0.1"],
}


def _keys(dst: str) -> list[int]:
    with dstore.open(dst) as ds:
        return [int(k) for k in ds["train"]["key"][:]]


@pytest.mark.parametrize("fmt", list(EXT))
def test_sigkill_during_appends(tmp_path, tiles, stepped, fmt):
    if fmt == "arrayrecord":
        pytest.importorskip("array_record")
    x, _ = tiles
    rng = random.Random(hash(fmt) & 0xFFFF)
    dst = str(tmp_path / f"d{EXT[fmt]}")
    base = str(tmp_path / "base.npz")
    dstore.save({"train": {"x": x[:30], "key": np.arange(30, dtype=np.int64)}}, base)
    dstore.convert(base, dst, to=fmt, options=dict(o.split("=") for o in SMALL[fmt][1::2]))
    expected = list(range(30))
    for attempt in range(1, KILLS + 2):
        src = str(tmp_path / f"more{attempt}.npz")
        keys = np.arange(120, dtype=np.int64) + 1000 * attempt
        dstore.save({"train": {"x": np.tile(x, (2, 1, 1, 1))[:120], "key": keys}}, src)
        run = stepped(["convert", src, dst, "--append"], BATCH_BYTES)
        if attempt > KILLS:  # the last one runs to its end
            code, err = run.run_to_end()
            assert code == 0, err
            expected += keys.tolist()
            break
        moment = rng.randint(1, 12)
        stopped = True  # the child waits at a step (False: it ended before the moment)
        while run.steps < moment and (stopped := run.next_step()):
            if run.steps < moment:
                run.go()
        if not stopped:  # fewer steps than the moment: the append ran to its end
            code, err = run.finish()
            assert code == 0, err
            expected += keys.tolist()
            assert _keys(dst) == expected, (fmt, attempt)
            continue
        if rng.random() < 0.5:  # or at a random instant after it was let go
            run.go()
            time.sleep(rng.random() * 0.05)
        run.signal(signal.SIGKILL)
        run.proc.wait()
        got = _keys(dst)
        assert got in (expected, expected + keys.tolist()), (fmt, attempt, len(got))
        expected = got
        assert dstore.api.check(dst).ok, (fmt, attempt)
    assert _keys(dst) == expected
    assert dstore.api.check(dst).ok
    assert append_leftovers(dst) == []
