"""Sharded conversions killed or interrupted in a child process (``dstore convert``,
:class:`~dstore.testing.children.ConversionChild`), at moments picked from the run's
own progress: SIGKILL leaves only dstore's temporaries and ``--resume`` ends with the
bytes of an uninterrupted run; Ctrl-C keeps finished shards and says so in one line,
or, inside the first shard, leaves nothing; a killed ``--overwrite`` keeps the old
output. Those that run several Python processes each are marked ``slow``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ..abc import Codec
from .checks import file_digests
from .children import ConversionChild
from .data import sharded_data
from .sharded_base import shard_options
from .sharded_resume import ResumeTests

__all__ = ["KillTests"]

_SIGNALS = {
    "SIGINT": (signal.SIGINT, 130, "interrupted: no output was left behind"),
    # systemd, timeout and Kubernetes stop a process with SIGTERM
    "SIGTERM": (signal.SIGTERM, 143, "terminated (SIGTERM): no output was left behind"),
}

Start = Callable[[Codec, list[str]], ConversionChild]


def _resumed(out: str) -> int:
    """How many shards a resumed run's summary says it kept."""
    return int(out.split("resumed: ")[1].split(" of ")[0])


class KillTests(ResumeTests):
    """Sharded runs killed in child processes (a mixin of the sharded suite)."""

    @pytest.fixture
    def child(self) -> Iterator[Start]:
        """Starts :class:`ConversionChild` runs of a codec; any still alive at the end is
        killed."""
        runs: list[ConversionChild] = []

        def start(codec: Codec, argv: list[str]) -> ConversionChild:
            runs.append(ConversionChild(type(codec), argv))
            return runs[-1]

        yield start
        for run in runs:
            run.close()

    def kill_at(self, child: Start, codec: Codec, argv: list[str], records: int) -> None:
        """SIGKILL a run stopped once it has reported ``records`` records."""
        run = child(codec, argv)
        if not run.stop_at(records):  # the child's own words say why (seen once, under load)
            code, _, err = run.finish()
            raise AssertionError(f"the run ended before its step (exit {code}): {err[-800:]}")
        run.signal(signal.SIGKILL)
        assert run.finish()[0] == -signal.SIGKILL

    @pytest.mark.slow
    def test_resume_after_sigkill_is_byte_identical(
        self, codec: Codec, tmp_path: Any, child: Start
    ) -> None:
        """Killed a third of the way in: no destination, only dstore's temporaries
        beside it; the resumed run killed too; the next resume keeps the shards of
        both and writes the bytes of a plain run."""
        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        argv = self.cli_argv(codec, src, dst, options)
        self.kill_at(child, codec, argv, 40)
        assert not os.path.exists(dst) and self.leftovers(dst)
        self.kill_at(child, codec, [*argv, "--resume"], 80)  # kept shards are reported first
        code, out, err = child(codec, [*argv, "--resume"]).finish()
        assert code == 0, err
        assert _resumed(out) >= 2, out  # at least a shard of each killed run
        assert file_digests(dst) == reference
        assert not self.leftovers(dst)

    @pytest.mark.slow
    def test_sigint_keeps_finished_shards_for_resume(
        self, codec: Codec, tmp_path: Any, child: Start
    ) -> None:
        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        argv = self.cli_argv(codec, src, dst, options)
        run = child(codec, argv)
        assert run.stop_at(60)
        run.signal(signal.SIGINT)
        code, _, err = run.finish()
        assert code == 130, err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "--resume" in lines[0] and "shards are kept" in lines[0], lines
        assert not os.path.exists(dst)
        code, out, err = child(codec, [*argv, "--resume"]).finish()
        assert code == 0 and _resumed(out) >= 2, (out, err)
        assert file_digests(dst) == reference

    @pytest.mark.parametrize("sig", list(_SIGNALS))  # quick: it stops at the first step
    def test_a_signal_inside_the_first_shard_leaves_nothing(
        self, codec: Codec, tmp_path: Any, child: Start, sig: str
    ) -> None:
        """Ctrl-C or SIGTERM before any shard is finished: exit 130 or 143, one line,
        nothing left behind (not even the lock), the input untouched."""
        number, exit_code, message = _SIGNALS[sig]
        data = sharded_data()
        src = self.source(tmp_path, data)
        before = file_digests(src)
        dst = self.out(tmp_path, codec)
        run = child(codec, self.cli_argv(codec, src, dst, shard_options(codec, data)))
        assert run.next_step(), "the conversion ended without a step"
        assert [f for f in self.leftovers(dst) if ".dstore-tmp-" in f]
        assert [f for f in self.leftovers(dst) if f.endswith(".dstore-lock")]
        run.signal(number)
        code, _, err = run.finish()
        assert code == exit_code, err
        assert [ln for ln in err.splitlines() if ln.strip()] == [message]
        assert sorted(os.listdir(tmp_path)) == ["src.npz"]
        assert file_digests(src) == before

    @pytest.mark.slow
    def test_kill_and_resume_at_random_progress_is_byte_identical(
        self, codec: Codec, tmp_path: Any, child: Start
    ) -> None:
        """Kills at random records (inside shards and between them, at the last one
        before the commit), resumed with other encoding threads where the format has
        the option, one resume under CPU load: every output has the plain run's bytes."""
        src, options, reference = self.plain_run(codec, tmp_path)
        threads = "workers" in self.option_names(codec)
        rng = random.Random(f"{codec.name} issue 17")
        cases = [(rng.randrange(1, 120), rng.choice([1, 2, 3]), rng.choice([1, 4]), False)]
        cases += [(rng.randrange(1, 120), 1, 2, True)]
        cases += [(120, 3, 2, False)]  # stopped at the last step: the commit still to come
        for i, (at, workers, resume_workers, load) in enumerate(cases):
            dst = self.out(tmp_path, codec, f"out{i}")
            run_options = {**options, "workers": str(workers)} if threads else options
            self.kill_at(child, codec, self.cli_argv(codec, src, dst, run_options), at)
            assert not os.path.exists(dst) and self.leftovers(dst), i
            resume_options = {**options, "workers": str(resume_workers)} if threads else options
            argv = [*self.cli_argv(codec, src, dst, resume_options), "--resume"]
            hogs = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(2 * load)
            ]
            try:
                code, _, err = child(codec, argv).finish()
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
            assert code == 0, (i, err)
            assert file_digests(dst) == reference, f"case {i}: killed after {at} records"
            assert not self.leftovers(dst), i

    @pytest.mark.slow
    def test_sigkill_over_an_old_output_keeps_it(
        self, codec: Codec, tmp_path: Any, child: Start
    ) -> None:
        """``--overwrite`` killed at random moments: the old output is still there, byte
        for byte; killed in the final commit: the old output or the whole new one; the
        next run removes what the killed ones left and writes the new one."""
        src, options, reference = self.plain_run(codec, tmp_path)
        dst = self.out(tmp_path, codec)
        old = {s: {n: v[::-1] for n, v in fields.items()} for s, fields in sharded_data().items()}
        self.convert(codec, self.source(tmp_path, old, "old.npz"), dst, options)
        kept = file_digests(dst)
        argv = [*self.cli_argv(codec, src, dst, options), "--overwrite"]
        rng = random.Random(f"{codec.name} overwrite")
        for at in [rng.randrange(1, 120), rng.randrange(1, 120), 120]:
            self.kill_at(child, codec, argv, at)
            assert file_digests(dst) == kept, f"the old output was damaged (killed at {at})"
        assert self.leftovers(dst)
        late = child(codec, argv)  # let go after its last step: killed in the commit, or after
        assert late.stop_at(120)
        late.go()
        time.sleep(rng.uniform(0, 0.3))  # only where the kill lands, not whether
        late.signal(signal.SIGKILL)
        late.finish()
        assert file_digests(dst) in (kept, reference), "neither the old output nor the new"
        self.convert(codec, src, dst, options, overwrite=True)
        assert file_digests(dst) == reference and not self.leftovers(dst)
