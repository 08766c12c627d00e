"""Sharded conversion on Dask distributed: same bytes as the local run, failures named by shard."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import dstore
from dstore.testing import file_digests

pytest.importorskip("imagecodecs")
distributed = pytest.importorskip("distributed")

from dstore.codecs.tfrecord import TFRecordCodec, TFRecordShardWriter

# The whole module is slow: starts Dask clusters (~16 s); `pytest -m "not slow"` leaves it out.
pytestmark = pytest.mark.slow

OPTIONS = {"shard_mb": "0.25"}


@pytest.fixture(autouse=True)
def _codecs_registered_here_leave(monkeypatch):
    """The test codecs registered below (flaky-tfrecord, late-tfrecord) leave with their
    test: ``dstore demo`` converts to every registered format, and met them in a later
    test when this file ran first."""
    from dstore import registry

    registry._load_entry_points()  # loaded into the dict that stays, not into the copy
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))


@pytest.fixture
def sources(tmp_path, tiles):
    x, y = tiles
    data = {
        "x_train": np.tile(x, (4, 1, 1, 1)),
        "y_train": np.tile(y, (4, 1)),
        "x_test": x,
        "y_test": y,
    }
    stored, deflated = str(tmp_path / "stored.npz"), str(tmp_path / "deflated.npz")
    np.savez(stored, **data)
    np.savez_compressed(deflated, **data)
    return stored, deflated


@pytest.mark.parametrize("which", ["stored", "deflated"])
def test_distributed_output_is_byte_identical(tmp_path, client, sources, which):
    src = sources[0] if which == "stored" else sources[1]
    local = dstore.convert(src, tmp_path / "local.tfrecords", options=OPTIONS, dtype="keep")
    seen = []
    remote = dstore.convert(
        src,
        tmp_path / "dask.tfrecords",
        options=OPTIONS,
        client=client,
        progress=lambda n, total: seen.append((n, total)),
    )
    assert local.shards is not None and local.shards.shards >= 4
    assert file_digests(tmp_path / "local.tfrecords") == file_digests(tmp_path / "dask.tfrecords")
    assert sum(n for n, _ in seen) == remote.records and {t for _, t in seen} == {remote.records}
    # workers read stored members themselves; deflated ones are streamed from here
    assert ("only streams" in remote.shards.note) == (which == "deflated")
    assert dstore.api.check(tmp_path / "dask.tfrecords").ok


def test_distributed_cast_matches_local(tmp_path, client, features):
    feats, labels = features
    feats = feats * np.float32(1.001)  # off the float16 grid, so the cast has an error to report
    src = str(tmp_path / "f.npz")
    np.savez(src, x_train=feats, y_train=labels)
    local = dstore.convert(
        src, tmp_path / "a.tfrecords", dtype="float16", options={"shard_mb": "0.05"}
    )
    remote = dstore.convert(
        src, tmp_path / "b.tfrecords", dtype="float16", options={"shard_mb": "0.05"}, client=client
    )
    assert file_digests(tmp_path / "a.tfrecords") == file_digests(tmp_path / "b.tfrecords")
    assert remote.cast["x"].max_abs_error == local.cast["x"].max_abs_error > 0
    # every part of the error travels back from the workers (the mean was 0 on Dask)
    assert remote.cast["x"].count == local.cast["x"].count == feats.size
    assert remote.cast["x"].mean_abs_error == pytest.approx(
        local.cast["x"].mean_abs_error, rel=1e-9
    )
    assert remote.cast["x"].mean_abs_error > 0


def test_failed_shard_is_named_and_nothing_is_committed(tmp_path, client, sources):
    src = str(tmp_path / "src.tfrecords")
    dstore.convert(sources[0], src, options=OPTIONS)
    victim = sorted(
        f for f in os.listdir(src) if f.startswith("train") and f.endswith(".tfrecord")
    )[2]
    with open(os.path.join(src, victim), "r+b") as f:
        f.seek(5000)
        byte = f.read(1)
        f.seek(5000)
        f.write(bytes([byte[0] ^ 0xFF]))
    dst = tmp_path / "out.tfrecords"
    with pytest.raises(dstore.errors.CodecIOError) as err:
        dstore.convert(src, dst, options=OPTIONS, client=client)
    message = str(err.value)
    assert "failed (after 2 retries)" in message and victim in message, message
    assert "train-00002-of-" in message  # the output shard is named too
    assert not dst.exists()
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".out.tfrecords")]


def test_scheduler_address_from_the_cli(tmp_path, client, sources, capsys):
    from dstore.cli import main

    dst = tmp_path / "cli.tfrecords"
    assert (
        main(
            [
                "convert",
                sources[0],
                str(dst),
                "--scheduler",
                client.scheduler.address,
                "-o",
                "shard_mb=0.25",
            ]
        )
        == 0
    )
    dstore.convert(sources[0], tmp_path / "local.tfrecords", options=OPTIONS)
    assert file_digests(dst) == file_digests(tmp_path / "local.tfrecords")


def test_client_needs_a_format_written_in_parts(tmp_path, client, sources):
    # zarr is written as chunk regions on Dask (tests/test_zarr_dask.py); npz is one file
    with pytest.raises(dstore.errors.CodecIOError, match="single file with a single writer"):
        dstore.convert(sources[0], tmp_path / "out.npz", client=client)


class _FlakyWriter(TFRecordShardWriter):
    """Fails each shard's first attempt, as a worker losing its disk or network would."""

    marker_dir = ""

    def write_shard(self, root, shard, batches):
        marker = os.path.join(self.marker_dir, shard.file)
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise OSError(f"transient failure writing {shard.file}")
        return super().write_shard(root, shard, batches)


class _FlakyCodec(TFRecordCodec):
    name = "flaky-tfrecord"
    marker_dir = ""

    def shard_writer(self, schema, plan):
        writer = _FlakyWriter(schema, self.options, plan)
        writer.marker_dir = self.marker_dir
        return writer


def test_transient_failures_are_retried_by_dask(tmp_path, client, sources):
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
    markers = tmp_path / "markers"
    markers.mkdir()
    _FlakyCodec.marker_dir = str(markers)
    dstore.register_codec(_FlakyCodec, clobber=True)
    try:
        dstore.convert(
            sources[0],
            tmp_path / "flaky.tfrecords",
            to="flaky-tfrecord",
            options=OPTIONS,
            client=client,
        )
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    dstore.convert(sources[0], tmp_path / "plain.tfrecords", options=OPTIONS)
    assert len(os.listdir(markers)) >= 4  # every shard failed once ...
    flaky, plain = tmp_path / "flaky.tfrecords", tmp_path / "plain.tfrecords"
    card = "croissant.json"  # names the format as registered: "flaky-tfrecord"
    assert {k: v for k, v in file_digests(flaky).items() if k != card} == {
        k: v for k, v in file_digests(plain).items() if k != card
    }  # ... and was redone
    flaky_card = (flaky / card).read_text().replace("flaky-tfrecord", "tfrecord")
    assert flaky_card == (plain / card).read_text()


class _CancelledLateWriter(TFRecordShardWriter):
    """Shard 0 fails on every attempt. Every other shard, once started, leaves its
    thread slot to the retries (``secede``), waits until Dask has cancelled it
    (the client gave up), then writes its shard anyway, as a worker busy with a
    long shard does: Dask cannot stop a running task, only forget its result."""

    marker_dir = ""

    def write_shard(self, root, shard, batches):
        import uuid

        from distributed import secede
        from distributed.worker import get_worker, thread_state

        def mark(what):
            open(os.path.join(self.marker_dir, f"{what}-{shard.file}"), "w").close()

        if shard.index == 0 and shard.split == "train":
            mark(f"failed{uuid.uuid4().hex}")
            raise OSError(f"disk gone writing {shard.file}")
        mark("started")
        worker, key = get_worker(), thread_state.key
        secede()
        for _ in range(6000):  # until cancelled; a cap so that a regression cannot hang
            ts = worker.state.tasks.get(key)
            if ts is None or ts.state == "cancelled":
                mark("waited")
                break
            time.sleep(0.02)
        info = super().write_shard(root, shard, batches)
        mark("done")
        return info


class _CancelledLateCodec(TFRecordCodec):
    name = "late-tfrecord"
    marker_dir = ""

    def shard_writer(self, schema, plan):
        writer = _CancelledLateWriter(schema, self.options, plan)
        writer.marker_dir = self.marker_dir
        return writer


def test_no_task_writes_after_a_failed_run_returns(tmp_path, client, sources):
    """The cause of a .dstore-tmp-* left under load: tasks still running on workers
    wrote shards into the temporary output while it was being removed. The run
    now waits until no task of it still runs, then removes it."""
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    markers = tmp_path / "markers"
    markers.mkdir()
    _CancelledLateCodec.marker_dir = str(markers)
    dstore.register_codec(_CancelledLateCodec, clobber=True)
    dst = tmp_path / "out.tfrecords"
    try:
        with pytest.raises(dstore.errors.CodecIOError, match="disk gone"):
            dstore.convert(sources[0], dst, to="late-tfrecord", options=OPTIONS, client=client)
        seen = os.listdir(markers)  # at the moment convert returned
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    started = {f.split("-", 1)[1] for f in seen if f.startswith("started-")}
    done = {f.split("-", 1)[1] for f in seen if f.startswith("done-")}
    assert any(f.startswith("waited-") for f in seen), (
        seen
    )  # a task outlived the client's give-up ...
    assert started == done, seen  # ... and every started task had ended before convert returned
    assert not dst.exists()
    assert sorted(os.listdir(tmp_path)) == ["deflated.npz", "markers", "stored.npz"]
