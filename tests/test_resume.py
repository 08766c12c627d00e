"""--resume: what is not the sharded suite's.

Resume after Ctrl-C, SIGKILL and SIGINT, a second interruption, kills at random
progress with other thread counts or under load, a damaged kept shard, changed
options, a finished output and Dask's bytes are tested for every sharded format by
``dstore.testing.ShardedCodecSuite`` (``tests/test_sharded_suite.py``)."""

from __future__ import annotations

import os


def test_resume_needs_a_sharded_format(tmp_path, label_maker_npz):
    from dstore.cli import main

    assert main(["convert", label_maker_npz, str(tmp_path / "out.npz"), "--resume"]) == 2
    assert not os.path.exists(tmp_path / "out.npz")
