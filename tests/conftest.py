from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.testing import photo_features


@pytest.fixture(scope="session")
def tiles() -> tuple[np.ndarray, np.ndarray]:
    """Real-photo tiles (64x64x3 uint8) and one-hot uint8 labels."""
    return photo_tiles(60, 64)


@pytest.fixture(scope="session")
def features() -> tuple[np.ndarray, np.ndarray]:
    return photo_features()


@pytest.fixture
def label_maker_npz(tmp_path, tiles) -> str:
    """A small label-maker style data.npz, uncompressed as label-maker writes it."""
    x, y = tiles
    path = os.path.join(tmp_path, "data.npz")
    np.savez(
        path,
        x_train=x[:40],
        y_train=y[:40],
        x_test=x[40:50],
        y_test=y[40:50],
        x_val=x[50:],
        y_val=y[50:],
    )
    return path


# A child process running the real `dstore` command that stops at each point of
# progress -- every batch reported -- until the test lets it go on (a sharded
# format's kills: dstore.testing.ConversionChild, which registers the codec too). Tests that kill or interrupt a conversion pick their
# moment from this progress, never from wall time, so a busy machine cannot make
# the conversion finish before the signal (or a second writer start too late).
_STEPPED_DRIVER = r"""
import signal
import sys

from dstore import api, cli

# Ctrl-C must reach dstore even when the tests run in a background job (whose
# children start with SIGINT ignored), as it does from a terminal.
signal.signal(signal.SIGINT, signal.default_int_handler)

batch_bytes, argv = int(sys.argv[1]), sys.argv[2:]


def pause(*_):
    sys.stdout.write("dstore-step\n")
    sys.stdout.flush()
    sys.stdin.readline()  # returns "" at once when the test closed stdin: run free


convert = api.convert


def stepped_convert(*args, **kwargs):
    kwargs["progress"] = pause
    if batch_bytes:
        kwargs["batch_bytes"] = batch_bytes
    return convert(*args, **kwargs)


api.convert = stepped_convert
sys.exit(cli.main(argv))
"""


class Stepped:
    """``dstore ARGV`` in a child process, stopped at each step of its progress."""

    def __init__(self, argv: list[str], batch_bytes: int = 0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _STEPPED_DRIVER, str(batch_bytes), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.steps = 0

    def next_step(self) -> bool:
        """Wait, however long it takes, until the child stops at its next step
        (True), or until it ends without one (False)."""
        assert self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            if line.startswith("dstore-step"):
                self.steps += 1
                return True
        return False

    def go(self) -> None:
        """Let the child go on from the step it stopped at."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self) -> tuple[int, str]:
        """Let the child run free to its end: its exit code and stderr."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        self.proc.stdout.read()
        err = self.proc.stderr.read() if self.proc.stderr is not None else ""
        return self.proc.wait(), err

    def run_to_end(self) -> tuple[int, str]:
        """Go on at every step; count them (``self.steps``)."""
        while self.next_step():
            self.go()
        return self.finish()


@pytest.fixture
def stepped():
    """Factory of :class:`Stepped` runs; any still alive at teardown is killed."""
    runs: list[Stepped] = []

    def start(argv: list[str], batch_bytes: int = 0) -> Stepped:
        runs.append(Stepped(argv, batch_bytes))
        return runs[-1]

    yield start
    for run in runs:
        if run.proc.poll() is None:
            run.proc.kill()
        run.proc.wait()
        for f in (run.proc.stdin, run.proc.stdout, run.proc.stderr):
            if f is not None:
                with contextlib.suppress(BrokenPipeError):
                    f.close()


@pytest.fixture(scope="module")
def client():
    """A Dask client of two worker processes, as a real cluster has (separate
    interpreters, pickled tasks). The dashboard takes a free port (``None`` would still
    bind :8787, busy on a shared machine)."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def _close_s3fs_sessions(s3fs) -> None:
    """Close s3fs's HTTP sessions while their event loop runs (else aiohttp warns at exit)."""
    from fsspec.asyn import sync

    for inst in list(s3fs.S3FileSystem._cache.values()):
        client = getattr(inst, "_s3", None)
        loop = getattr(inst, "loop", None)
        if client is not None and loop is not None and loop.is_running():
            sync(loop, client.close)
            inst._s3 = None


@pytest.fixture(scope="module")
def moto_s3(request):
    """A moto S3 server on loopback for one test module, with the module's ``BUCKET``
    made: ``{"fs": S3FileSystem, "server": ThreadedMotoServer, "port": int}``. The AWS
    variables point at it for the module's tests and are restored after."""
    s3fs = pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir(request.module.BUCKET)
    state = {"fs": fs, "server": server, "port": port}
    try:
        yield state
    finally:
        _close_s3fs_sessions(s3fs)
        state["server"].stop()  # a test may have restarted it
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def card_source(tmp_path_factory, tiles, features) -> str:
    """The cards' tests' source (test_card*.py): real photo tiles, their features
    (float32), labels, names and boxes (ragged) as npz, in splits train and test."""
    x, _ = tiles
    feats, labels = features
    rng = np.random.default_rng(0)

    def split(lo: int, hi: int) -> dict[str, object]:
        n = hi - lo
        return {
            "image": x[lo:hi, :32, :32],
            "feat": feats[lo:hi, :8].astype(np.float32),
            "label": labels[lo:hi].astype(np.int64),
            "name": np.array([f"tile {i}: é" for i in range(lo, hi)]),
            "boxes": [rng.random((1 + i % 3, 4)).astype(np.float32) for i in range(n)],
        }

    path = str(tmp_path_factory.mktemp("src") / "src.npz")
    dstore.save({"train": split(0, 12), "test": split(12, 16)}, path)
    return path
