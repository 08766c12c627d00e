"""Worker processes for encoders that hold the GIL: whole shards, or chunks of records.

fpng's Python binding holds the GIL while it encodes, so threads give a
conversion one core of PNG encoding. Here the work runs in
``python -m dstore.sharding.processes`` children, one per core, fed
length-prefixed pickles over their stdin and answering on their stdout,
results in submission order per child. A child writes a whole shard when it
can read the source itself (:func:`dstore.engine.run.write_sharded`), or
encodes chunks of records sent to it (:mod:`dstore.codecs.example.fields`). The children run
the same code on the same records as threads would, so the bytes are the same.

Why not ``multiprocessing``/``ProcessPoolExecutor``: their ``spawn`` and
``forkserver`` children import the parent's ``__main__`` again (a user's
unguarded script would run twice), and ``fork`` copies a process whose other
threads (prefetch, hashing) may hold locks. A plain child process has neither
problem. A child exits when its stdin closes, so it never outlives its parent.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import multiprocessing
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import IO, Any

__all__ = [
    "EncoderProcesses",
    "discard",
    "encoder_processes",
    "in_child",
    "report",
    "warm_up",
]

_LENGTH = struct.Struct("<Q")


def _send(f: IO[bytes], obj: Any, out_of_band: bool = True) -> None:
    """``obj`` pickled; with ``out_of_band``, its large contiguous arrays (pickle protocol
    5's out-of-band buffers) written straight from their memory: no pickled copy of the
    pixels. Answers go in band, so nothing of them stays a view of the parent's inbox."""
    buffers: list[pickle.PickleBuffer] = []
    meta = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append if out_of_band else None)
    raws = [b.raw() for b in buffers]
    f.write(_LENGTH.pack(len(meta)) + _LENGTH.pack(len(raws)))
    f.write(b"".join(_LENGTH.pack(r.nbytes) for r in raws) + meta)
    for r in raws:
        f.write(r)
    f.flush()


def _read_into(f: IO[bytes], view: memoryview) -> memoryview:
    got = 0
    while got < len(view):
        k = f.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            raise EOFError
        got += k
    return view


class _Inbox:
    """Where messages are read into: one buffer kept and grown, not one per message.

    A fresh buffer for each chunk of pixels is faulted in page by page (on a
    virtual machine about as costly as encoding); the child's arguments are
    views of the kept buffer, used up before the next message is read."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def take(self, n: int) -> memoryview:
        if len(self.buffer) < n:
            self.buffer = bytearray(-(-n // (1 << 20)) << 20)  # whole MiB: few regrowths
        return memoryview(self.buffer)[:n]


def _receive(f: IO[bytes], inbox: _Inbox | None = None) -> Any:
    """A message of :func:`_send`; with ``inbox``, its buffers are views of the inbox's
    (valid until the next message), else fresh."""
    head = f.read(2 * _LENGTH.size)
    if len(head) < 2 * _LENGTH.size:
        raise EOFError
    meta_len, n_raws = _LENGTH.unpack(head[:8])[0], _LENGTH.unpack(head[8:])[0]
    sizes = [_LENGTH.unpack(f.read(_LENGTH.size))[0] for _ in range(n_raws)]
    total = meta_len + sum(sizes)
    view = inbox.take(total) if inbox is not None else memoryview(bytearray(total))
    _read_into(f, view)
    buffers, pos = [], meta_len
    for n in sizes:
        buffers.append(view[pos : pos + n])
        pos += n
    # from our own parent or child over a private pipe, never from outside
    return pickle.loads(view[:meta_len], buffers=buffers)  # noqa: S301


#: Linux's F_SETPIPE_SZ; a pipe of 1 MiB moves a chunk of tiles in a few system calls
_F_SETPIPE_SZ = 1031
_PIPE_BYTES = 1 << 20


def _widen(pipe: IO[bytes] | None) -> None:
    if pipe is not None and sys.platform.startswith("linux"):
        import fcntl

        with contextlib.suppress(OSError):  # over /proc/sys/fs/pipe-max-size: keep the default
            fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)


class _Child:
    """One worker process: tasks written in order, answers read in order by a thread."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dstore.sharding.processes"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # a process group of its own, with what it starts (array_record's writer
            # child): :func:`discard` stops them all. It ignores Ctrl-C anyway (``_main``)
            start_new_session=True,
            env={
                **os.environ,
                # the parent's import path, so the child runs the same dstore
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
                # numpy's BLAS threads would wait for work a child never gives them,
                # spinning on the cores the children encode on
                "OPENBLAS_NUM_THREADS": "1",
            },
        )
        for pipe in (self.proc.stdin, self.proc.stdout):
            _widen(pipe)
        self.inbox = _Inbox()  # answers' records are copied out of it by unpickling
        self.lock = threading.Lock()
        self.pending: deque[Future[Any]] = deque()
        #: called (on the answers' thread) with each :func:`report` of the child's tasks
        self.on_report: Callable[[Any], None] | None = None
        self.reader = threading.Thread(target=self._read, name="dstore-encode-child", daemon=True)
        self.reader.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        stdin = self.proc.stdin
        assert stdin is not None
        with self.lock:
            if self.proc.poll() is not None:
                raise RuntimeError(f"encoder process exited (code {self.proc.returncode})")
            self.pending.append(future)
            _send(stdin, (fn, args))
        return future

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            try:
                ok, value = _receive(stdout, self.inbox)
            except EOFError:
                break
            except Exception as e:  # noqa: BLE001 - read whole, it did not unpickle: the answer
                # is lost, not the stream; its task fails instead of being waited for forever
                ok, value = False, RuntimeError(f"unreadable answer: {type(e).__name__}: {e}")
            if ok is None:  # a report of the task in hand (progress), not its answer
                if self.on_report is not None:
                    self.on_report(value)
                continue
            future = self.pending.popleft()
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        stdout.close()
        code = self.proc.wait()
        while self.pending:  # the child died with tasks in hand (killed, out of memory)
            self.pending.popleft().set_exception(
                RuntimeError(f"encoder process exited (code {code}) before answering")
            )

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class EncoderProcesses:
    """``submit(fn, *args)`` to ``n`` child processes in turn; futures of the answers."""

    def __init__(self, n: int) -> None:
        self.children = [_Child() for _ in range(n)]
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.children)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """``fn(*args)`` in the next child (``fn`` and ``args`` pickled: a module-level function)."""
        with self._lock:
            child = self.children[self._next]
            self._next = (self._next + 1) % len(self.children)
        return child.submit(fn, *args)

    def close(self) -> None:
        for child in self.children:
            child.close()


_pools: dict[int, EncoderProcesses] = {}
_pools_lock = threading.Lock()


class _ThisProcess:
    #: True in a child: its own work runs on threads, never in children of its own
    in_child = False
    #: in a child, its answers' pipe (:func:`report` writes to it mid-task)
    answers: IO[bytes] | None = None


_this = _ThisProcess()


def in_child() -> bool:
    """Whether this process is one of another's worker processes."""
    return _this.in_child


def discard(pool: EncoderProcesses) -> None:
    """Stop ``pool``'s children now (a failed or interrupted conversion: none may write
    into an output about to be removed); the next :func:`encoder_processes` starts others."""
    with _pools_lock:
        for n, kept in list(_pools.items()):
            if kept is pool:
                del _pools[n]
    for child in pool.children:
        # its group: a process the child started (a library's writer) would otherwise
        # go on writing its file after the child is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)
    pool.close()
    for child in pool.children:
        for _ in range(10_000):  # until the kills are done (a bound for safety, not a timing)
            if not _group_runs(child.proc.pid):
                break
            time.sleep(0.001)


def _group_runs(group: int) -> bool:
    """Whether a process of process group ``group`` still runs (a zombie writes nothing;
    an orphan's may never be reaped in a container). Linux's /proc; elsewhere False."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # after the command's closing parenthesis: state, parent, process group
        state, _, pgrp = stat[stat.rfind(b")") + 2 :].split()[:3]
        if int(pgrp) == group and state not in (b"Z", b"X"):
            return True
    return False


def encoder_processes(n: int, start: bool = True) -> EncoderProcesses | None:
    """This process's ``n`` encoder children, kept until exit once started (``start``:
    start them if not running); None where a process may not have children (a
    daemonic process: Dask's and multiprocessing's workers) or ``n`` < 2."""
    if n < 2 or _this.in_child or multiprocessing.current_process().daemon:
        return None
    with _pools_lock:
        pool = _pools.get(n)
        if pool is not None and any(c.proc.poll() is not None for c in pool.children):
            pool.close()  # one died (killed, out of memory): a fresh set
            del _pools[n]
            pool = None
        if pool is None and start:
            pool = _pools[n] = EncoderProcesses(n)
        return pool


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


def warm_up(pool: EncoderProcesses, modules: Sequence[str]) -> None:
    """Have each child import ``modules`` now (its first task would), while this
    process goes on with other work."""
    for child in pool.children:
        child.submit(_import_all, tuple(modules))


@atexit.register
def _close_pools() -> None:
    for pool in _pools.values():
        pool.close()
    _pools.clear()


@functools.lru_cache(maxsize=8)
def unpickled(state: bytes) -> Any:
    """An object sent pickled once per shard (an encoder), unpickled once per child."""
    return pickle.loads(state)  # noqa: S301 - pickled by this process's parent


def report(value: Any) -> None:
    """In a child, from the thread running its task: send ``value`` to the parent now,
    to the child's ``on_report`` (a task's progress). Elsewhere: nothing."""
    if _this.answers is not None:
        _send(_this.answers, (None, value), out_of_band=False)


def _portable(error: Exception) -> Exception:
    """``error``, or a RuntimeError naming it when it would not unpickle in the parent (an
    exception class whose ``__init__`` takes other arguments than its message)."""
    try:
        pickle.loads(pickle.dumps(error, protocol=5))  # noqa: S301 - our own bytes
    except Exception:  # noqa: BLE001 - any failure: what matters is the message
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: run each ``(fn, args)`` and answer ``(True, result)`` or
    ``(False, exception)``, until stdin closes; :func:`report` sends ``(None, value)``."""
    _this.answers = stdout
    inbox = _Inbox()
    while True:
        try:
            fn, args = _receive(stdin, inbox)
        except EOFError:
            return
        try:
            answer: tuple[bool, Any] = (True, fn(*args))
        except Exception as e:  # noqa: BLE001 - handed to the parent, raised there
            answer = (False, _portable(e))
        try:
            _send(stdout, answer, out_of_band=False)
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            error = RuntimeError(f"unpicklable answer: {type(e).__name__}: {e}")
            _send(stdout, (False, error), out_of_band=False)


def _main() -> None:
    # run as __main__: the state belongs to the module the unpickled tasks import
    from dstore.sharding import processes as imported  # noqa: PLW0406 - see above

    imported._this.in_child = True
    # Ctrl-C reaches the whole process group: the parent stops its children itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the answers get the real stdout; whatever a library prints goes to stderr instead
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    imported.serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    _main()
