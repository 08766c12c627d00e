"""Datasets that grow (issue #37): ``append=True`` on every registered format and every
field kind it stores, each version read back element by element; the refusals (schema,
settings, a source already in the history) leave the dataset byte for byte as it was."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import dstore
from dstore.errors import AppendError, VersionError
from dstore.sources.opening import open_reader
from dstore.testing import (
    assert_columns_equal,
    file_digests,
    kind_cases,
    parts_options,
    usable_formats,
)

FORMATS = usable_formats(text=True)


def _write(path: str, fmt: str, data, kinds=None, **options) -> None:
    dstore.save(data, path, format=fmt, kinds=kinds, **options)


def _small(fmt: str) -> dict[str, str]:
    """Options that cut even a small dataset into several shards or chunks."""
    return parts_options(fmt, shard_mb=0.02, chunk_mb=0.01)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("case", list(kind_cases()))
def test_append_every_format_every_kind(tmp_path, fmt, case):
    """Version 1 holds the first records, version 2 all of them (the same values as one
    write of all), whatever the kind; a kind the format does not store is not tried."""
    from dstore.registry import get_codec_class

    kind, records = kind_cases()[case]
    if not isinstance(kind, get_codec_class(fmt).kinds):
        pytest.skip(f"{fmt} does not store {kind.describe()}")
    n = len(records)
    cut = n // 2
    labels = np.arange(n, dtype=np.int64) * 3
    kinds = {("train", "f"): kind}
    dst = str(tmp_path / f"d{FORMATS[fmt]}")
    whole = str(tmp_path / f"whole{FORMATS[fmt]}")
    more = str(tmp_path / "more.zarr")
    try:
        _write(
            dst, fmt, {"train": {"f": records[:cut], "label": labels[:cut]}}, kinds, **_small(fmt)
        )
    except dstore.errors.UnsupportedDtypeError:
        pytest.skip(f"{fmt} refuses these records")
    _write(whole, fmt, {"train": {"f": records, "label": labels}}, kinds, **_small(fmt))
    # the new records arrive in a zarr store (any format would do): kinds survive it
    _write(more, "zarr", {"train": {"f": records[cut:], "label": labels[cut:]}}, kinds)
    report = dstore.convert(more, dst, append=True)
    assert report.version == 2 and report.records == n - cut
    with open_reader(whole) as expected, open_reader(dst) as got:
        assert got.version == 2
        want, have = expected.read("train"), got.read("train")
        for name in ("f", "label"):
            assert_columns_equal(want[name], have[name], (fmt, case, name))
    codec = get_codec_class(fmt)
    if not (codec.sharded or codec.appends_in_place):  # rewritten whole: the latest only
        with pytest.raises(VersionError, match="version 1 was replaced by version 2"):
            open_reader(dst, version=1)
        return
    with open_reader(dst, version=1) as first, open_reader(whole) as expected:
        assert first.version == 1 and first.schema.splits["train"].count == cut
        have = first.read("train")
        want = expected.read("train")
        assert_columns_equal(have["label"], want["label"][:cut])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_versions_and_time_travel(tmp_path, fmt, tiles):
    """Three versions (a new split in the third): each reads as it was, through
    dstore.open too; a version that is not there is one VersionError line."""
    x, y = tiles
    labels = y.argmax(1).astype(np.int64)
    dst = str(tmp_path / f"d{FORMATS[fmt]}")
    _write(dst, fmt, {"train": {"x": x[:20], "y": labels[:20]}}, **_small(fmt))
    _write(str(tmp_path / "b.npz"), "npz", {"train": {"x": x[20:30], "y": labels[20:30]}})
    _write(
        str(tmp_path / "c.npz"),
        "npz",
        {"train": {"x": x[30:35], "y": labels[30:35]}, "test": {"x": x[35:45], "y": labels[35:45]}},
    )
    dstore.convert(str(tmp_path / "b.npz"), dst, append=True)
    dstore.convert(str(tmp_path / "c.npz"), dst, append=True)
    with dstore.open(dst) as ds:
        np.testing.assert_array_equal(ds["train"]["x"][:], x[:35])
        np.testing.assert_array_equal(ds["test"]["y"][:], labels[35:45])
    rewritten = not (fmt == "zarr" or dstore.registry.get_codec_class(fmt).sharded)
    for version, count, splits in (
        (1, 20, ["train"]),
        (2, 30, ["train"]),
        (3, 35, ["test", "train"]),
    ):
        if rewritten and version < 3:
            with pytest.raises(VersionError, match=f"version {version} was replaced"):
                dstore.open(dst, version=version)
            continue
        with dstore.open(dst, version=version) as ds:
            assert sorted(ds) == splits
            np.testing.assert_array_equal(ds["train"]["x"][:], x[:count])
            np.testing.assert_array_equal(ds["train"]["y"][-1], labels[count - 1])
    with pytest.raises(VersionError, match=r"no version 4; its versions are 1\.\.3") as e:
        dstore.open(dst, version=4)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_schema_that_disagrees_is_refused_and_the_dataset_is_untouched(tmp_path, fmt, tiles):
    x, y = tiles
    dst = str(tmp_path / f"d{FORMATS[fmt]}")
    _write(dst, fmt, {"train": {"x": x[:10], "y": y[:10].argmax(1).astype(np.int64)}})
    before = file_digests(tmp_path)
    wrong = str(tmp_path / "wrong.npz")
    _write(wrong, "npz", {"train": {"x": x[10:12], "y": y[10:12].argmax(1).astype(np.int32)}})
    before = file_digests(dst)
    with pytest.raises(AppendError) as e:
        dstore.convert(wrong, dst, append=True)
    message = str(e.value)
    assert "field 'y'" in message and "int64" in message and "int32" in message, message
    assert "\n" not in message
    assert file_digests(dst) == before
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(dst), "wrong.npz"])
    other = str(tmp_path / "other.npz")
    _write(other, "npz", {"train": {"x": x[10:12], "z": np.zeros(2, np.int64)}})
    with pytest.raises(AppendError, match="split 'train': the source has field"):
        dstore.convert(other, dst, append=True)
    assert file_digests(dst) == before


def test_the_datasets_dtype_policy_applies_and_an_explicit_conflict_is_refused(tmp_path, features):
    feats, labels = features
    dst = str(tmp_path / "f.tfrecords")
    _write(str(tmp_path / "a.npz"), "npz", {"train": {"f": feats[:60], "y": labels[:60]}})
    _write(str(tmp_path / "b.npz"), "npz", {"train": {"f": feats[60:], "y": labels[60:]}})
    dstore.convert(str(tmp_path / "a.npz"), dst, dtype="float16")
    before = file_digests(dst)
    with pytest.raises(
        AppendError, match="dtype float32 for field 'f' conflicts with the dataset's float16"
    ):
        dstore.convert(str(tmp_path / "b.npz"), dst, append=True, dtype="float32")
    with pytest.raises(
        AppendError, match=r"option shard_mb=1 conflicts with the dataset's shard_mb=256"
    ):
        dstore.convert(str(tmp_path / "b.npz"), dst, append=True, options={"shard_mb": "1"})
    assert file_digests(dst) == before
    dstore.convert(str(tmp_path / "b.npz"), dst, append=True, dtype="float16")  # the same: fine
    with dstore.open(dst) as ds:
        f = ds["train"]["f"][:]
    assert f.dtype == np.float16
    np.testing.assert_array_equal(f, feats.astype(np.float16))


def test_a_source_already_appended_is_refused_by_version_unless_asked(tmp_path, tiles):
    x, _ = tiles
    dst = str(tmp_path / "d.parquet")
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    _write(a, "npz", {"train": {"x": x[:10]}})
    _write(b, "npz", {"train": {"x": x[10:20]}})
    dstore.convert(a, dst)
    dstore.convert(b, dst, append=True)
    before = file_digests(dst)
    with pytest.raises(AppendError, match=r"b.npz is already in it: version 2 \(append of"):
        dstore.convert(b, dst, append=True)
    with pytest.raises(AppendError, match=r"a.npz is already in it: version 1 \(convert of"):
        dstore.convert(a, dst, append=True)
    # the same records under another name: the content is what counts
    shutil.copy(b, tmp_path / "copy.npz")
    with pytest.raises(AppendError, match="version 2"):
        dstore.convert(str(tmp_path / "copy.npz"), dst, append=True)
    assert file_digests(dst) == before
    dstore.convert(b, dst, append=True, append_again=True)
    with dstore.open(dst) as ds:
        np.testing.assert_array_equal(ds["train"]["x"][:], np.concatenate([x[:20], x[10:20]]))


def test_appending_to_nothing_is_refused(tmp_path, label_maker_npz):
    with pytest.raises(AppendError, match="no such dataset"):
        dstore.convert(label_maker_npz, str(tmp_path / "none.tfrecords"), append=True)
    assert sorted(os.listdir(tmp_path)) == ["data.npz"]


def test_an_append_reports_the_bytes_it_added(tmp_path, tiles):
    """A folder of shards: the new shards and their indexes, not the manifests rewritten."""
    x, _ = tiles
    dst = str(tmp_path / "d.tfrecords")
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    _write(a, "npz", {"train": {"x": x[:10]}})
    _write(b, "npz", {"train": {"x": x[10:20]}})
    dstore.convert(a, dst)
    before = set(file_digests(dst))
    report = dstore.convert(b, dst, append=True)
    new = [n for n in file_digests(dst) if n not in before and not n.startswith(".dstore-versions")]
    assert new and all(n.endswith((".tfrecord", ".idx")) for n in new), new
    assert report.bytes_out == sum(os.path.getsize(os.path.join(dst, n)) for n in new)
