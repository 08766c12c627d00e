"""--resume: an interrupted sharded conversion finishes with the bytes of an uninterrupted run."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dstore.testing import cli_command, file_digests

# The whole module is slow: kills and resumes sharded conversions in child processes (~40 s); `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow

pytest.importorskip("imagecodecs")

OPTIONS = ["-o", "shard_mb=1", "-o", "png_level=9"]  # ~20 slow shards: time to interrupt


@pytest.fixture
def source(tmp_path, tiles) -> str:
    x, y = tiles
    src = str(tmp_path / "data.npz")
    np.savez(
        src, x_train=np.tile(x, (30, 1, 1, 1)), y_train=np.tile(y, (30, 1)), x_test=x, y_test=y
    )
    return src


@pytest.fixture
def reference(tmp_path_factory, source) -> dict[str, str]:
    ref = str(tmp_path_factory.mktemp("ref") / "ref.tfrecords")
    subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", source, ref, *OPTIONS],
        check=True,
        capture_output=True,
    )
    return file_digests(ref)


def start_and_stop_after(src: str, dst: str, shards: int, sig: int, *extra: str) -> tuple[int, str]:
    """Start a conversion and signal it once ``shards`` shards are in its journal."""
    proc = subprocess.Popen(
        cli_command("convert", src, dst, *OPTIONS, *extra),  # SIGINT even in a background job
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    parent, base = os.path.split(dst)
    while proc.poll() is None:  # measured from the run's own journal, however long it takes
        journals = glob.glob(os.path.join(parent, f".{base}.dstore-tmp-*", "dstore.journal"))
        if journals:
            with open(journals[0]) as f:
                if len(f.read().splitlines()) > shards:  # header + finished shards
                    break
        time.sleep(0.01)
    assert proc.poll() is None, "conversion finished before it could be interrupted"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def resume(src: str, dst: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dstore.cli", "convert", src, dst, *OPTIONS, "--resume", *extra],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_resume_after_sigkill_is_byte_identical(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 3, signal.SIGKILL)
    assert not os.path.exists(dst)
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    kept = int(res.stdout.split("resumed: ")[1].split(" of ")[0])
    assert kept >= 3
    assert file_digests(dst) == reference
    assert sorted(os.listdir(tmp_path)) == ["data.npz", "out.tfrecords"]


def test_resume_survives_a_second_interruption(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 2, signal.SIGKILL)
    start_and_stop_after(
        source, dst, 5, signal.SIGKILL, "--resume"
    )  # the resumed run is killed too
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    kept = int(res.stdout.split("resumed: ")[1].split(" of ")[0])
    assert kept >= 5  # shards of both earlier runs were kept
    assert file_digests(dst) == reference


def test_sigint_keeps_finished_shards_for_resume(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    returncode, err = start_and_stop_after(source, dst, 2, signal.SIGINT)
    assert returncode == 130
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--resume" in lines[0] and "shards are kept" in lines[0], lines
    assert not os.path.exists(dst)
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    assert file_digests(dst) == reference


def test_resume_rewrites_a_damaged_kept_shard(tmp_path, source, reference):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 2, signal.SIGKILL)
    (tmp,) = glob.glob(str(tmp_path / ".out.tfrecords.dstore-tmp-*"))
    with open(os.path.join(tmp, "dstore.journal")) as f:
        first = json.loads(f.read().splitlines()[1])["file"]
    with open(os.path.join(tmp, first), "r+b") as f:
        f.seek(100)
        f.write(b"\xff\x00\xff")
    res = resume(source, dst)
    assert res.returncode == 0, res.stderr
    assert file_digests(dst) == reference


def test_resume_refuses_changed_options_and_keeps_the_work(tmp_path, source):
    dst = str(tmp_path / "out.tfrecords")
    start_and_stop_after(source, dst, 1, signal.SIGKILL)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "dstore.cli",
            "convert",
            source,
            dst,
            "-o",
            "shard_mb=2",
            "-o",
            "png_level=9",
            "--resume",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot resume" in lines[0] and "codec" in lines[0], lines
    assert glob.glob(str(tmp_path / ".out.tfrecords.dstore-tmp-*")), (
        "the interrupted work must be kept"
    )
    assert not os.path.exists(dst)


def test_resume_without_leftovers_is_a_plain_run(tmp_path, label_maker_npz):
    import dstore

    dst = str(tmp_path / "out.tfrecords")
    report = dstore.convert(label_maker_npz, dst, resume=True)
    assert report.shards is not None and report.shards.kept == 0
    assert dstore.api.check(dst).ok


def test_resume_needs_a_sharded_format(tmp_path, label_maker_npz):
    from dstore.cli import main

    assert main(["convert", label_maker_npz, str(tmp_path / "out.npz"), "--resume"]) == 2
    assert not os.path.exists(tmp_path / "out.npz")


# ------------------------------------------------------------------ issue #17
# A child converts with the library and prints the records written so far after
# every progress step (per record batch): kill moments are picked from that
# count, not from wall time, so they land at random points of the run's own
# progress -- before the first shard, inside a shard, between shards, after the
# last -- whatever the machine's speed or load.

CHILD = """
import sys
import dstore
src, dst, workers, resume = sys.argv[1:]
done = 0
def progress(n, total):
    global done
    done += n
    print(done, flush=True)
report = dstore.convert(src, dst, options={"shard_mb": "0.25", "workers": workers},
                        resume=resume == "1", progress=progress)
print("SUMMARY", report.summary(), flush=True)
"""


def child(src: str, dst: str, workers: int, resume: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, src, dst, str(workers), "1" if resume else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_after(proc: subprocess.Popen, records: int) -> bool:
    """SIGKILL ``proc`` once it reports ``records`` written; False if it finished first."""
    for line in proc.stdout:
        if line.strip().isdigit() and int(line) >= records:
            proc.kill()
            break
    proc.communicate(timeout=120)  # reaps it and closes its pipes
    return proc.returncode == -signal.SIGKILL


def busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


@pytest.fixture
def photo_npz(tmp_path) -> str:
    from dstore.demo import photo_tiles

    x, y = photo_tiles(240, 96, seed=17)
    src = str(tmp_path / "photos.npz")
    np.savez(src, x_train=x[:180], y_train=y[:180], x_test=x[180:], y_test=y[180:])
    return src


def test_kill_and_resume_at_random_progress_is_byte_identical(tmp_path, photo_npz):
    """Issue #17: every resumed output has the bytes of the uninterrupted run, for kills at
    random records, resumes with other worker counts, one cycle under CPU load, and a kill
    after the end (the resume then finds the output complete and exits 0)."""
    import random

    ref = str(tmp_path / "ref.tfrecords")
    proc = child(photo_npz, ref, 1)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    total = 240
    reference = file_digests(ref)
    assert len(reference) > 8  # many shards, so kills land between and inside them
    rng = random.Random(17)
    cases = [
        (rng.randrange(1, total), rng.choice([1, 2, 3]), rng.choice([1, 2, 4]), False)
        for _ in range(5)
    ]
    cases += [
        (rng.randrange(1, total), 2, 1, True),
        (total, 3, 2, False),
    ]  # under load; after the end
    killed = 0
    for i, (at, workers, resume_workers, load) in enumerate(cases):
        dst = str(tmp_path / f"out{i}.tfrecords")
        hogs = busy_loops(2) if load else []
        try:
            was_killed = kill_after(child(photo_npz, dst, workers), at)
            killed += was_killed
            res = child(photo_npz, dst, resume_workers, resume=True)
            out, err = res.communicate(timeout=300)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
        assert res.returncode == 0, (i, err)
        assert file_digests(dst) == reference, (
            f"case {i}: kill after {at} records, workers {workers}->{resume_workers}"
        )
        assert ("already complete" in out) == (not was_killed), (i, out)
    assert killed >= 4, f"only {killed} of {len(cases)} runs were still going when killed"


def test_dask_run_is_byte_identical_to_local(tmp_path, photo_npz):
    distributed = pytest.importorskip("distributed")
    import dstore

    ref = str(tmp_path / "ref.tfrecords")
    dstore.convert(photo_npz, ref, options={"shard_mb": "0.25"})
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        dstore.convert(
            photo_npz,
            tmp_path / "dask.tfrecords",
            options={"shard_mb": "0.25", "workers": "1"},
            client=client,
        )
    assert file_digests(tmp_path / "dask.tfrecords") == file_digests(ref)


def test_resume_of_a_finished_output(tmp_path, label_maker_npz):
    """--resume on a complete output of the same command: reported complete, exit 0, untouched.
    Anything else there (other options, a damaged shard, a foreign folder) is refused in one line."""
    from dstore.cli import main

    dst = str(tmp_path / "out.tfrecords")
    cmd = ["convert", label_maker_npz, dst, "-o", "shard_mb=0.05"]
    assert main(cmd) == 0
    before = file_digests(dst)
    res = subprocess.run(
        [sys.executable, "-m", "dstore.cli", *cmd, "--resume"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "already complete" in res.stdout and "nothing to do" in res.stdout
    assert file_digests(dst) == before

    for change in ("options", "damaged", "foreign"):
        other = cmd if change != "options" else [*cmd, "-o", "png_level=1"]
        if change == "damaged":
            shard = min(f for f in os.listdir(dst) if f.endswith(".tfrecord"))
            with open(os.path.join(dst, shard), "r+b") as f:
                f.seek(20)
                f.write(b"\x00\xff")
        if change == "foreign":
            dstore_json = os.path.join(dst, "dstore.json")
            os.remove(dstore_json)
        kept = file_digests(dst)
        res = subprocess.run(
            [sys.executable, "-m", "dstore.cli", *other, "--resume"],
            check=False,
            capture_output=True,
            text=True,
        )
        assert res.returncode == 2, (change, res.stdout)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "already exists" in lines[0] and "--overwrite" in lines[0], (
            change,
            lines,
        )
        assert file_digests(dst) == kept, "a refused resume must not touch the output"
