"""``dstore convert`` in a child process that stops at every step of its progress.

A test that kills or interrupts a conversion picks its moment from the run's own
progress, never from wall time: the child reports each batch of records written
and waits until the test lets it go on, so a busy machine cannot make it finish
before the signal. The child registers the codec's class first (a format defined
in a test module, which the child imports by name), so any registered format,
built in or not, can be killed mid-write.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Sequence

from ..abc import Codec

__all__ = ["ConversionChild"]

_DRIVER = r"""
import importlib
import signal
import sys

from dstore import api, cli, registry

# Ctrl-C must reach dstore even when the tests run in a background job (whose
# children start with SIGINT ignored), as it does from a terminal.
signal.signal(signal.SIGINT, signal.default_int_handler)
module, qualname, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
cls = importlib.import_module(module)
for attr in qualname.split("."):
    cls = getattr(cls, attr)
if cls.name not in registry.codec_names() or registry.get_codec_class(cls.name) is not cls:
    registry.register_codec(cls, clobber=True)


def pause(n, total):
    sys.stdout.write(f"dstore-step {n} {total}\n")
    sys.stdout.flush()
    sys.stdin.readline()  # returns "" at once when the test closed stdin: run free


convert = api.convert


def stepped_convert(*args, **kwargs):
    kwargs["progress"] = pause
    return convert(*args, **kwargs)


api.convert = stepped_convert
sys.exit(cli.main(argv))
"""


class ConversionChild:
    """``dstore ARGV`` (a ``convert``) in a child process with ``codec_class`` registered,
    stopped at each progress step; :attr:`records` counts the records it reported."""

    def __init__(self, codec_class: type[Codec], argv: Sequence[str]) -> None:
        env = dict(os.environ)
        # the parent's import path: the child finds this dstore and the test's module
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _DRIVER,
                codec_class.__module__,
                codec_class.__qualname__,
                *argv,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.records = 0
        self.total = 0
        self.out: list[str] = []

    def next_step(self) -> bool:
        """Wait, however long it takes, until the child stops at its next step (True),
        or until it ends without one (False)."""
        assert self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            if line.startswith("dstore-step "):
                n, total = line.split()[1:]
                self.records += int(n)
                self.total = int(total)
                return True
            self.out.append(line)
        return False

    def go(self) -> None:
        """Let the child go on from the step it stopped at."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def stop_at(self, records: int) -> bool:
        """Go on step by step until the child has reported at least ``records`` records
        and stopped there (True), or has ended (False)."""
        while self.next_step():
            if self.records >= records:
                return True
            self.go()
        return False

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self) -> tuple[int, str, str]:
        """Let the child run free to its end: its exit code, stdout and stderr."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        out = "".join(self.out) + self.proc.stdout.read()
        err = self.proc.stderr.read() if self.proc.stderr is not None else ""
        return self.proc.wait(), out, err

    def close(self) -> None:
        """Kill the child if it still runs, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(BrokenPipeError):
                    f.close()
