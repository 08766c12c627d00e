"""ArrayRecord under DataLoader workers: forked while this process has not imported
array_record (no thread pool to lose: workers start in a fraction of spawn's time),
spawned once it has. Run in a fresh interpreter: this test process may have
imported the library already."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("array_record")

_SCRIPT = r"""
import json, sys
import numpy as np
import dstore
from dstore.demo import photo_tiles
from dstore.testing import data_loader

src, out = sys.argv[1], sys.argv[2]
x, y = photo_tiles(96, 32, seed=3)
np.savez(src, x_train=x, y_train=y, k_train=np.arange(96))
dstore.convert(src, out, to="arrayrecord")  # written by a child interpreter

MODULE = "array_record.python.array_record_module"
result = {}
for when in ("not imported", "imported"):
    if when == "imported":
        next(iter(dstore.to_torch(out, "train")))  # a read in this process imports it
    result[when] = {"imported": MODULE in sys.modules}
    for shuffle in (0, "global"):
        ds = dstore.to_torch(out, "train", shuffle=shuffle, seed=5)
        loader = data_loader(ds, batch_size=16, num_workers=2, collate_fn=ds.collate_fn())
        ctx = loader.multiprocessing_context
        result[when]["context"] = None if ctx is None else ctx.get_start_method()
        got = {}
        for b in loader:
            for k, img in zip(b["k"].numpy().ravel().tolist(), b["x"].numpy()):
                assert k not in got, k
                got[k] = img
        assert sorted(got) == list(range(96)), sorted(got)
        for k, img in got.items():
            np.testing.assert_array_equal(img, x[k])
    result[when]["after"] = MODULE in sys.modules
print("RESULT " + json.dumps(result))
"""


def test_workers_fork_until_the_library_is_imported(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "t.npz"), str(tmp_path / "ar")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    # nothing in the parent imported the library: forked workers read every record
    assert result["not imported"] == {"imported": False, "context": None, "after": False}
    # once the parent has used it, its thread pool would not survive a fork: spawn
    assert result["imported"] == {"imported": True, "context": "spawn", "after": True}
