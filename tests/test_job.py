"""One ConvertJob per conversion: every public keyword of convert, save and --per-source
reaches the writer, and nothing is dropped on the way (a loose --overwrite once was)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import dstore
from dstore.api import memory
from dstore.api.per_source import write_per_source
from dstore.engine import cast as engine
from dstore.engine import shards as sharding_run
from dstore.engine.dtypes import CastStats, DtypePolicy
from dstore.engine.job import ConvertJob
from dstore.errors import UsageError
from dstore.testing import cli_command

# the module, not the function dstore.api.convert
convert_module = importlib.import_module("dstore.api.convert")


def _progress(n: int, total: int) -> None:
    pass


def _scan(n: int, total: int) -> None:
    pass


class _Observer:
    """A batch observer (``convert --check``'s kind): sees nothing here."""

    def begin(self, schema: Any) -> None:
        pass

    def __call__(self, split: str, start: int, batch: Any) -> None:
        pass


def test_job_is_frozen_and_replace_makes_a_copy() -> None:
    job = ConvertJob.build(options={"level": "3"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.overwrite = True  # type: ignore[misc]
    with pytest.raises(TypeError):  # the mappings are read-only too
        job.options["level"] = "9"  # type: ignore[index]
    other = job.replace(overwrite=True, sources=["a.npz"])
    assert other.overwrite and other.sources == ("a.npz",) and not job.overwrite
    with pytest.raises(TypeError):
        job.replace(no_such_setting=1)


def test_every_keyword_of_convert_lands_in_its_job(monkeypatch: Any, tmp_path: Any) -> None:
    """Each keyword of dstore.convert set to a value unlike its default, and each found
    in the job the entry point builds; a new keyword fails here until it is mapped."""
    policy = DtypePolicy("float16", on_overflow="clip")
    given: dict[str, Any] = {
        "to": "tfrecord",
        "from_format": "npz",
        "dtype": policy,
        "on_overflow": "clip",
        "overwrite": True,
        "options": {"shard_mb": "1"},
        "src_options": {"drop": "meta"},
        "batch_bytes": 12345,
        "progress": _progress,
        "resume": True,
        "client": "tcp://nowhere:1",
        "layout": "tf-classification",
        "keep_encoded": True,
        "follow_links": True,
        "scan_progress": _scan,
        "card": False,
        "append": True,
        "append_again": True,
        "version": 3,
        "observe": _Observer(),
        "shuffle_seed": 7,
    }
    params = inspect.signature(dstore.convert).parameters
    assert set(params) - {"src", "dst"} == set(given)
    for name, value in given.items():
        assert params[name].default != value, name  # each one differs from its default
    seen: list[ConvertJob] = []
    monkeypatch.setattr(convert_module, "convert_job", lambda src, dst, job: seen.append(job))
    dstore.convert(tmp_path / "a.npz", tmp_path / "b", **given)
    (job,) = seen
    assert job.to == "tfrecord" and job.from_format == "npz"
    assert job.policy == policy and job.policy.on_overflow == "clip"
    assert job.overwrite and job.resume and job.keep_encoded
    assert dict(job.options) == {"shard_mb": "1"}
    assert dict(job.src_options) == {"drop": "meta", "follow_links": True, "version": 3}
    assert job.append and job.append_again
    assert job.batch_bytes == 12345
    assert job.progress is _progress and job.scan_progress is _scan
    assert job.client == "tcp://nowhere:1" and job.layout == "tf-classification"
    assert job.card is False
    assert job.observe is given["observe"]
    assert job.shuffle_seed == 7
    # dtype as text goes through the same parser as before
    text = ConvertJob.build(dtype=["float16", "x=keep"], on_overflow="clip").policy
    assert text == DtypePolicy("float16", {"x": "keep"}, "clip")


def test_every_keyword_of_save_lands_in_its_job(monkeypatch: Any, tmp_path: Any) -> None:
    # kinds goes to the in-memory reader; a new keyword fails here until it is checked
    assert set(inspect.signature(dstore.save).parameters) == {
        "data", "path", "format", "dtype", "on_overflow", "overwrite", "kinds", "options"
    }  # fmt: skip
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(memory, "write_dataset", lambda *a: seen.append(a))
    data = {"train": {"x": np.zeros((2, 3), np.float32)}}
    dstore.save(data, tmp_path / "a.zarr", dtype="float16", on_overflow="clip", overwrite=True)
    ((_, path, codec, job),) = seen
    assert path == str(tmp_path / "a.zarr") and codec.name == "zarr"
    assert job.policy == DtypePolicy("float16", on_overflow="clip") and job.overwrite
    seen.clear()
    dstore.save(data, tmp_path / "a.bin", format="hdf5", compression="lzf")
    ((_, _, codec, job),) = seen
    assert codec.name == "hdf5" and job.to == "hdf5" and dict(job.options) == {"compression": "lzf"}


def _wrap_cast_batches(module: Any, monkeypatch: Any, seen: list[int]) -> None:
    real = module.cast_batches

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["batch_bytes"])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "cast_batches", spy)


@pytest.mark.parametrize("ext", [".npz", ".tfrecords"])
def test_batch_size_and_progress_reach_the_writer(
    monkeypatch: Any, tmp_path: Any, features: Any, ext: str
) -> None:
    """The single writer (npz) and the sharded one (tfrecord) read with convert's batch size."""
    feats, labels = features
    src = str(tmp_path / "f.npz")
    np.savez(src, x_train=feats, y_train=labels)
    seen: list[int] = []
    _wrap_cast_batches(engine, monkeypatch, seen)  # write_splits and the plan's sample
    _wrap_cast_batches(sharding_run, monkeypatch, seen)  # the shard loop (engine.shards)
    calls: list[int] = []
    out = str(tmp_path / f"o{ext}")
    dstore.convert(src, out, batch_bytes=4096, progress=lambda n, total: calls.append(n))
    assert seen and set(seen) == {4096}
    assert sum(calls) == len(labels)
    assert len(calls) > 1  # batches of 4 kB: more than one
    assert dstore.verify(src, out).ok


def test_write_dataset_still_takes_its_old_keywords(tmp_path: Any) -> None:
    reader = dstore.api.ArrayReader({"train": {"x": np.arange(6, dtype=np.float64)}})
    codec = dstore.sources.codec_for(str(tmp_path / "a.npz"), None, None)
    stats, _ = dstore.api.write_dataset(
        reader, str(tmp_path / "a.npz"), codec, policy=DtypePolicy("float16"), batch_bytes=16
    )
    assert stats["x"].count == 6
    with dstore.api.open_reader(str(tmp_path / "a.npz")) as r:
        assert r.schema.splits["train"].fields["x"].dtype == np.float16


# ------------------------------------------------------------------- --per-source


def _folder_of_sources(tmp_path: Any) -> str:
    """Two json files read as one dataset, written as one zarr store (its 'source' field)."""
    folder = tmp_path / "f"
    folder.mkdir()
    for i, n in enumerate([2, 3]):
        rows = np.arange(n * 4, dtype=float).reshape(n, 4).tolist()
        doc = [{"x": row, "y": j} for j, row in enumerate(rows)]
        (folder / f"img{i}.json").write_text(json.dumps(doc))
    out = str(tmp_path / "all.zarr")
    dstore.convert(str(folder), out)
    return out


def _run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(cli_command(*argv), check=False, capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    ("flag", "named"), [(("--resume",), "--resume"), (("--scheduler", "tcp://x:1"), "--scheduler")]
)
def test_per_source_refuses_what_it_cannot_do(tmp_path: Any, flag: Any, named: str) -> None:
    """--resume and --scheduler with --per-source were taken and silently ignored
    (the per-source path never received them): now one line, exit 2, nothing written."""
    src = _folder_of_sources(tmp_path)
    out = str(tmp_path / "out")
    run = _run_cli("convert", src, out, "--per-source", *flag)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{named} does not go with --per-source" in lines[0]
    assert not os.path.exists(out)
    with pytest.raises(UsageError):
        write_per_source(src, out, resume=True)


def test_per_source_keeps_overwrite_drop_and_dtype(tmp_path: Any) -> None:
    """Every setting --per-source takes reaches each file it writes."""
    src = _folder_of_sources(tmp_path)
    out = str(tmp_path / "out")
    rep = write_per_source(src, out, to="npz", dtype="float16", src_options={"drop": "y"})
    assert rep.files == 2 and rep.records == 5
    with np.load(os.path.join(out, "img1.npz")) as z:
        assert sorted(z.files) == ["x"]  # y dropped
        assert z["x"].dtype == np.float16
        assert z["x"].tolist() == np.arange(12, dtype=float).reshape(3, 4).tolist()
    before = os.stat(os.path.join(out, "img0.npz")).st_ino
    write_per_source(src, out, to="npz", overwrite=True)
    with np.load(os.path.join(out, "img0.npz")) as z:
        assert sorted(z.files) == ["x", "y"] and z["x"].dtype == np.float64
    assert os.stat(os.path.join(out, "img0.npz")).st_ino != before


# -------------------------------------------------------------------------- stats


def test_stats_of_two_tasks_merge_with_their_mean(tmp_path: Any) -> None:
    """Two Dask tasks' stats of one field, sent back pickled, merged as the runner does:
    the mean cast error is the mean over both parts' values, not 0."""
    x = np.linspace(0.1, 1000.0, 200)
    parts = []
    for half in (x[:120], x[120:]):
        stats: dict[str, CastStats] = {}
        policy = DtypePolicy("float16")
        spec = dstore.api.ArrayReader({"train": {"x": half}}).schema.splits["train"]
        policy.apply(spec, {"x": half}, 0, stats, "mem")
        parts.append(pickle.loads(pickle.dumps(stats)))  # noqa: S301 - our own bytes, as Dask sends them
    merged: dict[str, CastStats] = {}
    for part in parts:
        CastStats.merge_into(merged, part)
    err = np.abs(x.astype(np.float16).astype(np.float64) - x)
    assert merged["x"].count == 200
    assert merged["x"].sum_abs_error == pytest.approx(float(err.sum()))
    assert merged["x"].mean_abs_error == pytest.approx(float(err.mean())) and err.mean() > 0
    assert merged["x"].max_abs_error == pytest.approx(float(err.max()))
    report = convert_module.ConvertReport(
        "a", "b", "npz", "npz", 200, 1, 0, 0, 1, 1.0, cast={"x": merged["x"], "y": CastStats()}
    )
    assert f"mean abs {float(err.mean()):.3g}" in report.summary()
