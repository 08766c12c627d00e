"""Issue #24: the shards of a conversion whose PNG encoder holds the GIL (fpng) are
written by worker processes that each read their records from the source.

They must write the threads' bytes, check what their range reads do not (the npz
members' CRC-32), count the decoded bytes of varying-size fields as a local run
does, and fail as a local run fails, leaving nothing behind.
"""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

import dstore
from dstore.demo import photo_tiles
from dstore.engine import local, run
from dstore.errors import DstoreError
from dstore.sharding import processes
from dstore.testing import file_digests

TILES = 600  # past local.PROCESS_MIN_RECORDS


def _digests(folder: str) -> dict[str, str]:
    """Every file under ``folder`` (record indexes in .dstore-index/ too)."""
    return file_digests(folder)


@pytest.fixture
def spawned(monkeypatch):
    """The worker counts of the process pools the conversions asked for."""
    asked: list[int] = []
    real = processes.encoder_processes

    def counting(n: int, start: bool = True):
        asked.append(n)
        return real(n, start)

    monkeypatch.setattr(local, "encoder_processes", counting)
    return asked


def _tiles_npz(path: str, n: int = TILES, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    x, y = photo_tiles(n, 48, seed=seed)
    cut = n * 5 // 6
    np.savez(path, x_train=x[:cut], y_train=y[:cut], x_test=x[cut:], y_test=y[cut:])
    return x, y


@pytest.mark.parametrize("to", ["tfrecord", "webdataset", "parquet"])
def test_shard_processes_write_the_threads_bytes(tmp_path, spawned, to) -> None:
    """The same conversion on threads (``workers=1``) and in two worker processes: every
    file the same, byte for byte (the manifest included), and read back pixel for pixel."""
    assert TILES >= local.PROCESS_MIN_RECORDS
    src = str(tmp_path / "data.npz")
    x, y = _tiles_npz(src)
    opts = {"shard_mb": 0.5}
    dstore.convert(src, str(tmp_path / "threads"), to=to, options={**opts, "workers": 1})
    assert spawned == []
    dstore.convert(src, str(tmp_path / "procs"), to=to, options={**opts, "workers": 2})
    assert spawned and set(spawned) == {2}
    threads, procs = _digests(str(tmp_path / "threads")), _digests(str(tmp_path / "procs"))
    assert len([n for n in procs if n.startswith("train")]) >= 3
    assert threads == procs
    with dstore.open(str(tmp_path / "procs")) as back:
        got = back["train"].read()
        cut = TILES * 5 // 6
        assert np.array_equal(got["x"], x[:cut])
        assert np.array_equal(got["y"], y[:cut])
        assert np.array_equal(back["test"].read()["x"], x[cut:])


def test_shard_processes_count_varying_fields_as_threads_do(tmp_path, spawned) -> None:
    """A ragged field (boxes per tile): the report's raw bytes are the same whether the
    records passed through this process or through the workers."""
    x, _ = photo_tiles(TILES, 32, seed=9)
    rng = np.random.default_rng(9)
    lengths = rng.integers(0, 6, TILES)
    boxes = rng.integers(0, 32, (int(lengths.sum()), 4)).astype(np.int64)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    src = str(tmp_path / "od.npz")
    np.savez(
        src,
        x_train=x,
        **{"boxes_train.values": boxes, "boxes_train.row_splits": splits},
    )
    opts = {"shard_mb": 0.25}
    one = dstore.convert(src, str(tmp_path / "t"), to="tfrecord", options={**opts, "workers": 1})
    two = dstore.convert(src, str(tmp_path / "p"), to="tfrecord", options={**opts, "workers": 2})
    assert spawned and set(spawned) == {2}
    assert two.raw_bytes == one.raw_bytes
    assert _digests(str(tmp_path / "t")) == _digests(str(tmp_path / "p"))
    with dstore.open(str(tmp_path / "p")) as back:
        got = back["train"]["boxes"]
        for i in (0, 1, TILES // 2, TILES - 1):
            a, b = splits[i], splits[i + 1]
            assert np.array_equal(np.asarray(got[i]).reshape(-1, 4), boxes[a:b])


def _member_bytes(npz: str, member: str) -> tuple[int, int]:
    """Where a stored member's bytes start in the file (after its local header), and
    how many there are."""
    with zipfile.ZipFile(npz) as z:
        info = z.getinfo(member)
    with open(npz, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
    name_len, extra_len = (int.from_bytes(local[i : i + 2], "little") for i in (26, 28))
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def test_a_damaged_member_fails_in_processes_and_leaves_nothing(tmp_path, spawned) -> None:
    """A flipped byte inside the pixels: the workers read ranges (unchecked), this
    process checks the members' CRC-32 meanwhile. One error naming the file, split
    and field; no output left."""
    src = str(tmp_path / "data.npz")
    _tiles_npz(src)
    start, size = _member_bytes(src, "x_train.npy")
    with open(src, "r+b") as f:
        f.seek(start + size // 2)
        byte = f.read(1)
        f.seek(start + size // 2)
        f.write(bytes([byte[0] ^ 0x55]))
    dst = str(tmp_path / "out")
    with pytest.raises(DstoreError) as err:
        dstore.convert(src, dst, to="tfrecord", options={"shard_mb": 0.5, "workers": 2})
    assert spawned and set(spawned) == {2}
    message = str(err.value)
    assert "CRC" in message and "split 'train'" in message and "field 'x'" in message
    assert src in message and "\n" not in message
    assert not os.path.exists(dst)
    assert [n for n in os.listdir(tmp_path) if n != "data.npz"] == []


def test_shard_processes_report_progress_on_the_calling_thread(tmp_path, spawned) -> None:
    """The workers' progress reaches the caller's callback as records are written, on
    the thread that called convert, adding up to every record."""
    import threading

    src = str(tmp_path / "data.npz")
    _tiles_npz(src)
    calls: list[tuple[int, int, int]] = []
    dstore.convert(
        src,
        str(tmp_path / "out"),
        to="tfrecord",
        options={"shard_mb": 0.5, "workers": 2},
        progress=lambda done, total: calls.append((done, total, threading.get_ident())),
    )
    assert spawned and set(spawned) == {2}
    assert sum(c[0] for c in calls) == TILES
    assert {c[1] for c in calls} == {TILES}
    assert {c[2] for c in calls} == {threading.get_ident()}


def test_a_worker_knows_it_is_one_and_starts_no_workers_of_its_own() -> None:
    pool = processes.encoder_processes(2)
    assert pool is not None and not processes.in_child()
    assert pool.submit(processes.in_child).result(timeout=120) is True
    assert pool.submit(processes.encoder_processes, 2).result(timeout=120) is None


def _tmp_folder(parent: str, dst_name: str) -> str | None:
    """The temporary folder a conversion to ``dst_name`` writes in (``.NAME.dstore-tmp-*``)."""
    found = [n for n in os.listdir(parent) if n.startswith(f".{dst_name}.dstore-tmp-")]
    return os.path.join(parent, found[0]) if found else None


def _running_with(text: str) -> list[str]:
    """Command lines of the running (not zombie) processes that name ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:  # a zombie's command line reads empty
            found.append(cmdline)
    return found


@pytest.mark.parametrize("to", ["tfrecord", "arrayrecord"])
def test_an_interrupt_keeps_only_the_journaled_shards_and_resume_matches(
    tmp_path, spawned, to
) -> None:
    """Ctrl-C while the workers write (here: from the progress callback, once a shard is
    journaled and a worker is mid-shard): the folder kept for --resume holds the journal
    and the shards it lists, not the stopped workers' partial files, and nothing the
    workers started (array_record's writer child) still runs to write more; the resumed
    output is byte for byte an uninterrupted one."""
    src = str(tmp_path / "data.npz")
    _tiles_npz(src, 1200)
    opts = {"shard_mb": 0.25, "workers": 2}
    dstore.convert(src, str(tmp_path / "whole"), to=to, options={**opts, "workers": 1})
    seen: dict[str, list[str]] = {}

    def interrupt(done: int, total: int) -> None:
        folder = _tmp_folder(str(tmp_path), "out")
        assert folder is not None
        with open(os.path.join(folder, "dstore.journal")) as f:
            if len(f.read().splitlines()) < 2:  # the header, then one line per shard
                return
        # not waiting here: this thread starts the workers' next shards
        names = os.listdir(folder)
        if any(n.endswith(".part") for n in names):  # a worker is mid-shard
            seen["mid-shard"] = names
            raise KeyboardInterrupt

    dst = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt, match="resume=True"):
        dstore.convert(src, dst, to=to, options=opts, progress=interrupt)
    assert _running_with(str(tmp_path)) == []
    assert spawned and set(spawned) == {2} and "mid-shard" in seen
    folder = _tmp_folder(str(tmp_path), "out")
    assert folder is not None and not os.path.exists(dst)
    with open(os.path.join(folder, "dstore.journal")) as f:
        import json

        entries = [json.loads(line) for line in f.read().splitlines()[1:]]
    listed = {e["file"] for e in entries} | {e["index"]["file"] for e in entries if "index" in e}
    assert entries and set(file_digests(folder)) == listed | {"dstore.journal"}
    dstore.convert(src, dst, to=to, options=opts, resume=True)
    assert _digests(dst) == _digests(str(tmp_path / "whole"))


def test_a_source_changed_while_workers_read_it_fails_and_leaves_nothing(
    tmp_path, spawned, monkeypatch
) -> None:
    """A pixel byte flipped in place after this process checked the member's CRC-32 and
    before a worker maps those records: the workers would write the new bytes into a
    'finished' output. One error naming the file, split and field instead; nothing left."""
    src = str(tmp_path / "data.npz")
    _tiles_npz(src, 1200)
    data, size = _member_bytes(src, "x_train.npy")
    with np.load(src) as z:
        header = size - z["x_train"].nbytes
        row = z["x_train"][0].nbytes
    planned: list[list] = []
    real = run.write_in_processes

    def planning(pool, reader, writer, root, pending, *rest):
        planned.append(list(pending))
        return real(pool, reader, writer, root, pending, *rest)

    monkeypatch.setattr(run, "write_in_processes", planning)

    def flip_once(done: int, total: int) -> None:
        # workers take the largest shard first, one each: the last one queued is unread
        if planned and not getattr(flip_once, "flipped", False):
            queue = sorted(planned[0], key=lambda s: s.records, reverse=True)
            last = next(s for s in reversed(queue) if s.split == "train")
            assert last not in queue[:2]
            at = data + header + last.start * row + row // 2
            with open(src, "r+b") as f:
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ 0x01]))
            flip_once.flipped = True  # type: ignore[attr-defined]

    dst = str(tmp_path / "out")
    with pytest.raises(DstoreError) as err:
        dstore.convert(
            src, dst, to="tfrecord", options={"shard_mb": 0.25, "workers": 2}, progress=flip_once
        )
    assert spawned and set(spawned) == {2} and getattr(flip_once, "flipped", False)
    message = str(err.value)
    assert src in message and "split 'train'" in message and "field 'x'" in message
    assert "\n" not in message
    assert not os.path.exists(dst)
    assert sorted(os.listdir(tmp_path)) == ["data.npz"]


def test_workers_read_the_file_a_relative_path_names_after_a_chdir(
    tmp_path, spawned, monkeypatch
) -> None:
    """A long-lived process (a notebook) converts, changes directory (``%cd``) and
    converts a file of the same relative name: the workers kept from the first run must
    read the file the caller names now, not the one in the directory they started in."""
    for name, seed in (("a", 21), ("b", 22)):
        os.makedirs(tmp_path / name)
        _tiles_npz(str(tmp_path / name / "data.npz"), seed=seed)
    old = processes.encoder_processes(2, start=False)
    if old is not None:  # workers started elsewhere: this test starts them in a/
        processes.discard(old)
    opts = {"shard_mb": 0.5, "workers": 2}
    monkeypatch.chdir(tmp_path / "a")
    dstore.convert("data.npz", "out", to="tfrecord", options=opts)
    monkeypatch.chdir(tmp_path / "b")
    dstore.convert("data.npz", "out", to="tfrecord", options=opts)
    dstore.convert("data.npz", "threads", to="tfrecord", options={**opts, "workers": 1})
    assert spawned and set(spawned) == {2}
    with np.load(tmp_path / "b" / "data.npz") as b, dstore.open("out") as back:
        assert np.array_equal(back["train"].read()["x"], b["x_train"])
        assert np.array_equal(back["test"].read()["x"], b["x_test"])
    assert _digests("out") == _digests("threads")


def test_a_worker_error_that_does_not_unpickle_is_raised_not_hung_on() -> None:
    """An exception whose class takes other arguments than its message (dstore's
    UnknownCodecError; many libraries' errors) does not unpickle as it is: the answer
    must still arrive, naming the error, and the worker stay usable, or a conversion
    waits forever for a shard whose answer was lost."""
    from dstore.errors import UnknownCodecError
    from dstore.registry import get_codec_class

    pool = processes.encoder_processes(2)
    assert pool is not None
    with pytest.raises(RuntimeError, match=r"UnknownCodecError.*'nope'"):
        pool.submit(get_codec_class, "nope").result(timeout=120)  # a bound, not a timing
    assert pool.submit(processes.in_child).result(timeout=120) is True
    # an answer (not an error) that does not unpickle here: its task fails, named
    with pytest.raises(RuntimeError, match="unreadable answer"):
        pool.submit(UnknownCodecError, "nope", ["npz"]).result(timeout=120)
    assert pool.submit(processes.in_child).result(timeout=120) is True
