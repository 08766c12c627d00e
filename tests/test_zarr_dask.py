"""zarr on Dask: chunk-aligned blocks written as tasks give the bytes of a local run;
single-file formats (npz, HDF5) refuse a Dask client in one line naming why."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import pytest

import dstore

distributed = pytest.importorskip("distributed")
zarr = pytest.importorskip("zarr")


@pytest.fixture
def source(tmp_path: Any, tiles: tuple[np.ndarray, np.ndarray]) -> tuple[str, dict[str, Any]]:
    """An npz of photo tiles, their labels, a ragged field (boxes per tile), a string
    field (captions) and a list of strings per tile, in two splits."""
    x, y = tiles
    labels = y.argmax(axis=1)
    boxes = [
        np.array([[i, i + 1, i + 2 + k, i + 3 + k] for k in range(i % 4)], np.float32).reshape(
            -1, 4
        )
        for i in range(len(x))
    ]
    captions = [f"tile {i}: class {c} é" for i, c in enumerate(labels)]
    tags = [[f"t{j}" for j in range(i % 3)] for i in range(len(x))]
    data = {
        "train": {
            "image": x[:45],
            "label": labels[:45].astype(np.int64),
            "boxes": boxes[:45],
            "caption": captions[:45],
            "tags": tags[:45],
        },
        "test": {
            "image": x[45:],
            "label": labels[45:].astype(np.int64),
            "boxes": boxes[45:],
            "caption": captions[45:],
            "tags": tags[45:],
        },
    }
    path = str(tmp_path / "src.npz")
    dstore.save(data, path)
    return path, data


def _files(root: Any) -> dict[str, bytes]:
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            full = os.path.join(folder, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = f.read()
    return out


@pytest.mark.parametrize(
    "options",
    [
        {"chunk_mb": "0.05"},  # many chunks, written straight to their files
        {"chunk_mb": "0.02", "shard_chunks": "3"},  # zarr shards: blocks of whole shards
        {"chunk_mb": "0.05", "image_codec": "webp", "quality": "80"},  # one image per chunk
    ],
    ids=["chunks", "shards", "webp"],
)
def test_zarr_on_dask_is_byte_identical_to_a_local_run(
    tmp_path: Any, client: Any, source: tuple[str, dict[str, Any]], options: dict[str, str]
) -> None:
    if "image_codec" in options:
        pytest.importorskip("imagecodecs")
    src, data = source
    local, dask = tmp_path / "local.zarr", tmp_path / "dask.zarr"
    # small batches: many blocks, so tasks run on both workers and out of order
    dstore.convert(src, local, options=options, batch_bytes=20_000)
    report = dstore.convert(src, dask, options=options, client=client, batch_bytes=20_000)
    assert report.records == 60
    a, b = _files(local), _files(dask)
    assert sorted(a) == sorted(b)
    chunk = re.compile(r"(^|\\|/)c([./\\]\d+)+$")
    assert sum(bool(chunk.search(n)) for n in a) > 10  # many chunk files, not one
    for name in a:
        assert a[name] == b[name], name

    # zarr itself reads what the workers wrote, element by element
    g = zarr.open_group(str(dask), mode="r")
    for split, fields in data.items():
        if "image_codec" not in options:
            np.testing.assert_array_equal(g[f"{split}/image"][:], fields["image"])
        else:
            assert g[f"{split}/image"].shape == fields["image"].shape
        np.testing.assert_array_equal(g[f"{split}/label"][:], fields["label"])
        assert [str(s) for s in g[f"{split}/caption"][:]] == fields["caption"]
        splits, values = g[f"{split}/boxes/row_splits"][:], g[f"{split}/boxes/values"][:]
        for i, box in enumerate(fields["boxes"]):
            np.testing.assert_array_equal(values[splits[i] : splits[i + 1]], box)
        splits, values = g[f"{split}/tags/row_splits"][:], g[f"{split}/tags/values"][:]
        got = [[str(v) for v in values[splits[i] : splits[i + 1]]] for i in range(len(splits) - 1)]
        assert got == fields["tags"]


def test_a_failed_block_is_named_and_nothing_is_left(
    tmp_path: Any, client: Any, source: tuple[str, dict[str, Any]], monkeypatch: Any
) -> None:
    """A block a worker cannot write fails the conversion naming the array and records;
    the output folder is removed (no task writes into it afterwards)."""
    from dstore.codecs.zarr import writer as zarr_codec

    def refuse(region: Any, start: int, block: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(zarr_codec, "write_region", refuse)
    dst = tmp_path / "out.zarr"
    with pytest.raises(
        dstore.errors.CodecIOError, match=r"train/image records 0:\d+ failed.*disk full"
    ):
        dstore.convert(source[0], dst, options={"chunk_mb": "0.05"}, client=client)
    assert not dst.exists()
    assert sorted(os.listdir(tmp_path)) == ["src.npz"]


@pytest.mark.parametrize("ext", [".npz", ".h5"])
def test_single_file_formats_refuse_dask_naming_why(
    tmp_path: Any, client: Any, source: tuple[str, dict[str, Any]], ext: str
) -> None:
    if ext == ".h5":
        pytest.importorskip("h5py")
    dst = tmp_path / f"out{ext}"
    with pytest.raises(dstore.errors.CodecIOError) as info:
        dstore.convert(source[0], dst, client=client)
    message = str(info.value)
    assert "\n" not in message
    assert "cannot be written on Dask" in message and "single file with a single writer" in message
    assert str(dst) in message
    assert not dst.exists()


def test_scheduler_address_from_the_cli(
    tmp_path: Any, client: Any, source: tuple[str, dict[str, Any]], capsys: Any
) -> None:
    from dstore.cli import main

    address = client.scheduler.address
    dst, local = tmp_path / "cli.zarr", tmp_path / "local.zarr"
    assert main(["convert", source[0], str(dst), "--scheduler", address]) == 0
    dstore.convert(source[0], local)
    assert _files(dst) == _files(local)
    capsys.readouterr()
    h5 = tmp_path / "out.h5"
    assert main(["convert", source[0], str(h5), "--scheduler", address]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "single file with a single writer" in err[0], err
    assert not h5.exists()
