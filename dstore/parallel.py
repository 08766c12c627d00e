"""Order-preserving parallel map over a thread pool, and parallel raw deflate.

zlib and the image codecs release the GIL while they work, so threads give
all cores without copying batches into other processes.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, Literal, TypeVar

__all__ = [
    "NPY_HEADER_LOCK",
    "InlineExecutor",
    "KeptPool",
    "ParallelDeflate",
    "default_workers",
    "ordered_map",
    "prefetch",
]

#: held while numpy parses an ``.npy`` header (``ast.literal_eval``): two parses at once
#: on threads failed once with "SystemError: AST constructor recursion depth mismatch"
#: (decoding WebDataset ``.npy`` members, Python 3.11.7; not reproduced in 40,000
#: parses on 8 threads, so this lock is a precaution, untested)
NPY_HEADER_LOCK = threading.Lock()

#: records per task handed to a decoding thread: enough to amortise the hand-off,
#: few enough that a batch of 64 keeps every thread busy
DECODE_GROUP = 16

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class InlineExecutor(Executor):
    """Runs each call at once, in the caller's thread: with one worker (a DataLoader
    worker process reads with one) a hand-off to a pool thread is pure overhead."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        future: Future[R] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - the caller's result() raises it
            future.set_exception(e)
        return future


class KeptPool:
    """One executor of ``workers`` threads kept across calls (a reader's reads of a few
    records each must not start and stop a pool every time), made again in a process
    forked after it was made (its threads are not there)."""

    def __init__(self, workers: int, name: str) -> None:
        self.workers = max(1, workers)
        self.name = name
        self._pool: Executor | None = None
        self._pid = -1

    def get(self) -> Executor:
        if self._pool is None or self._pid != os.getpid():
            self._pool = (
                InlineExecutor()
                if self.workers == 1
                else ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            )
            self._pid = os.getpid()
        return self._pool

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.shutdown(wait=True)
        self._pool = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None, "_pid": -1}


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], pool: ThreadPoolExecutor, ahead: int
) -> Iterator[R]:
    """Like ``pool.map`` but keeps at most ``ahead`` items in flight (bounded memory)."""
    pending: deque[Future[R]] = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def prefetch(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """Produce ``items`` in a background thread, ``depth`` ahead of the consumer.

    Reading the next batch (file I/O, CRC, inflate: all release the GIL)
    overlaps with writing the current one. Errors surface in the consumer;
    closing the generator stops the producer.
    """
    import queue
    import threading

    q: queue.Queue[
        tuple[Literal["item"], T]
        | tuple[Literal["end"], None]
        | tuple[Literal["error"], BaseException]
    ] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, re-raised there
            q.put(("error", e))

    thread = threading.Thread(target=produce, name="dstore-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            msg = q.get()
            if msg[0] == "end":
                return
            if msg[0] == "error":
                raise msg[1]
            yield msg[1]
    finally:
        stop.set()
        while thread.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.05)


class ParallelDeflate:
    """A zlib-compressobj look-alike producing one raw deflate stream on all cores.

    Input is cut into blocks compressed independently and ended with a sync
    flush, so their concatenation is one valid deflate stream (the pigz trick;
    each block loses the previous 32 KiB as dictionary, costing well under 1%
    on blocks of a few MiB).
    """

    def __init__(
        self,
        level: int = 6,
        workers: int | None = None,
        block_size: int = 2 * 1024 * 1024,
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        self.level = level
        self.block_size = block_size
        self._own_pool = pool is None
        self.workers = workers or default_workers()
        self._pool = pool or ThreadPoolExecutor(self.workers, thread_name_prefix="dstore-deflate")
        self._buffer = bytearray()
        self._pending: deque[Future[bytes]] = deque()

    def _deflate_block(self, block: bytes | memoryview) -> bytes:
        c = zlib.compressobj(self.level, zlib.DEFLATED, -15)
        return c.compress(block) + c.flush(zlib.Z_SYNC_FLUSH)

    def _drain(self, keep: int) -> bytes:
        out = []
        while len(self._pending) > keep or (self._pending and self._pending[0].done()):
            out.append(self._pending.popleft().result())
        return b"".join(out)

    def compress(self, data: bytes | memoryview) -> bytes:
        # Whole blocks are compressed straight from the caller's buffer (no
        # copy); only a partial block at either end goes through _buffer.
        view = memoryview(data)
        if not view.nbytes:
            return b""
        view = view.cast("B")
        if self._buffer:
            take = self.block_size - len(self._buffer)
            self._buffer += view[:take]
            view = view[take:]
            if len(self._buffer) < self.block_size:
                return self._drain(keep=2 * self.workers)
            self._submit(bytes(self._buffer))
            self._buffer = bytearray()
        while len(view) >= self.block_size:
            self._submit(view[: self.block_size])
            view = view[self.block_size :]
        self._buffer += view
        return self._drain(keep=2 * self.workers)

    def _submit(self, block: bytes | memoryview) -> None:
        self._pending.append(self._pool.submit(self._deflate_block, block))
        if len(self._pending) > 2 * self.workers:
            # Bound memory: wait for the oldest block before queueing more.
            self._pending[0].result()

    def flush(self, mode: int = zlib.Z_FINISH) -> bytes:
        if self._buffer:
            self._submit(bytes(self._buffer))
            self._buffer = bytearray()
        out = self._drain(keep=0)
        if mode == zlib.Z_FINISH:
            # An empty final block terminates the stream.
            out += zlib.compressobj(self.level, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
            if self._own_pool:
                self._pool.shutdown(wait=True)
        return out
