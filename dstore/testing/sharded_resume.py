"""Resume, in this process: a sharded run stopped by Ctrl-C (``KeyboardInterrupt``)
keeps its finished shards, and ``resume=True`` writes only the rest, ending with the
bytes of an uninterrupted run; a changed command, a damaged kept shard or a finished
output are recognised. The same after SIGKILL and SIGINT of a child process:
:mod:`.sharded_kills`."""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import pytest

from ..abc import Codec
from ..errors import DstoreError, ResumableInterrupt
from .checks import file_digests
from .data import sharded_data
from .sharded_base import ShardedSuiteBase, shard_options

__all__ = ["ResumeTests"]


class ResumeTests(ShardedSuiteBase):
    """Interrupted sharded runs and ``resume=True`` (a mixin of the sharded suite)."""

    def plain_run(self, codec: Codec, tmp_path: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
        """The suite's data as an npz source, the options, and the digests of an
        uninterrupted run (``ref``)."""
        data = sharded_data()
        src = self.source(tmp_path, data)
        options = shard_options(codec, data)
        ref = self.out(tmp_path, codec, "ref")
        self.convert(codec, src, ref, options)
        return src, options, file_digests(ref)

    def interrupt(self, codec: Codec, src: str, dst: str, options: Any, records: int) -> str:
        """Ctrl-C once ``records`` records are written: the run's kept folder."""
        written = 0

        def ctrl_c(n: int, total: int) -> None:
            nonlocal written
            written += n
            if written >= records:
                raise KeyboardInterrupt

        with pytest.raises(ResumableInterrupt, match="shards are kept"):
            self.convert(codec, src, dst, options, progress=ctrl_c)
        assert not os.path.exists(dst)
        (kept,) = self.leftovers(dst)
        return os.path.join(os.path.dirname(dst), kept)

    def test_interrupted_run_resumes_to_the_bytes_of_a_plain_run(
        self, codec: Codec, tmp_path: Any
    ) -> None:
        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        self.interrupt(codec, src, dst, options, 50)
        report = self.convert(codec, src, dst, options, resume=True)
        assert report.shards.kept >= 2 and report.shards.written >= 2, report.shards
        assert file_digests(dst) == reference
        assert not self.leftovers(dst)

    def test_resume_rewrites_a_damaged_kept_shard(self, codec: Codec, tmp_path: Any) -> None:
        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        kept = self.interrupt(codec, src, dst, options, 50)
        with open(os.path.join(kept, "dstore.journal")) as f:
            first = json.loads(f.read().splitlines()[1])["file"]
        with open(os.path.join(kept, first), "r+b") as f:
            f.seek(os.path.getsize(os.path.join(kept, first)) // 2)
            f.write(b"\xff\x00\xff")
        report = self.convert(codec, src, dst, options, resume=True)
        assert file_digests(dst) == reference
        assert report.shards.written == report.shards.shards - report.shards.kept
        assert report.shards.kept >= 1  # the other kept shards were kept

    def test_resume_refuses_changed_options_and_keeps_the_work(
        self, codec: Codec, tmp_path: Any
    ) -> None:
        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        kept = self.interrupt(codec, src, dst, options, 30)
        before = file_digests(kept)
        other = {**options, "shard_mb": repr(float(options["shard_mb"]) * 2)}
        with pytest.raises(DstoreError, match="cannot resume") as err:
            self.convert(codec, src, dst, other, resume=True)
        assert "\n" not in str(err.value) and "codec" in str(err.value), err.value
        assert file_digests(kept) == before and not os.path.exists(dst)
        self.convert(codec, src, dst, options, resume=True)  # the same command still can
        assert file_digests(dst) == reference

    def test_resume_without_leftovers_is_a_plain_run(self, codec: Codec, tmp_path: Any) -> None:
        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        report = self.convert(codec, src, dst, options, resume=True)
        assert report.shards.kept == 0 and report.shards.written == report.shards.shards
        assert file_digests(dst) == reference

    def test_resume_of_a_finished_output(self, codec: Codec, tmp_path: Any, capsys: Any) -> None:
        """``--resume`` on the complete output of the same command: reported complete,
        exit 0, untouched. Other options, a damaged shard or a folder without its
        manifest there are refused in one line, and the folder is left as it was."""
        from ..cli import main

        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        argv = self.cli_argv(codec, src, dst, options)
        assert main(argv) == 0
        capsys.readouterr()
        assert main([*argv, "--resume"]) == 0
        out = capsys.readouterr().out
        assert "already complete" in out and "nothing to do" in out, out
        assert file_digests(dst) == reference
        first = self.manifest(dst)["splits"]["train"]["shards"][0]["file"]
        for change in ("options", "damaged", "foreign"):
            other = options
            if change == "options":
                other = {**options, "shard_mb": repr(float(options["shard_mb"]) * 2)}
            if change == "damaged":
                with open(os.path.join(dst, first), "r+b") as f:
                    f.seek(20)
                    f.write(b"\x00\xff")
            if change == "foreign":
                os.remove(os.path.join(dst, "dstore.json"))
            kept = file_digests(dst)
            assert main([*self.cli_argv(codec, src, dst, other), "--resume"]) == 2, change
            lines = capsys.readouterr().err.strip().splitlines()
            assert len(lines) == 1 and "already exists" in lines[0], (change, lines)
            assert "--overwrite" in lines[0], lines
            assert file_digests(dst) == kept, "a refused resume must not touch the output"
        assert not glob.glob(os.path.join(tmp_path, ".*dstore-*"))
