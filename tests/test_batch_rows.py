"""BatchRows: a batch filled record by record from decoding threads (WebDataset, any
format of the sharded container that decodes its records one by one)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from skimage import data

from dstore.errors import CodecIOError
from dstore.images.png import decode as png_decode
from dstore.images.png import encode_fast as png_encode
from dstore.model import Image, String, Tensor
from dstore.model.samples import BatchRows
from dstore.model.schema import FieldSpec, SplitSpec
from dstore.sharding.records import decode_into_batch


def _tiles(n: int) -> np.ndarray:
    img = data.astronaut()  # 512x512x3 uint8
    return np.stack([img[(i % 8) * 32 : (i % 8) * 32 + 64, i * 5 : i * 5 + 64] for i in range(n)])


def _spec(n: int) -> SplitSpec:
    return SplitSpec(
        "train",
        n,
        {
            "x": FieldSpec("x", Image(np.dtype(np.uint8), 3, 64, 64)),
            "y": FieldSpec("y", Tensor(np.dtype(np.int64), ())),
            "name": FieldSpec("name", String()),
        },
    )


def test_records_decoded_on_threads_land_in_their_rows() -> None:
    tiles = _tiles(40)
    records = [(png_encode(t), i, f"tile {i}".encode()) for i, t in enumerate(tiles)]
    spec = _spec(len(records))

    def decode(group: list, rows: BatchRows, first: int) -> None:
        for i, (png, label, name) in enumerate(group, first):
            rows.fill("x", i, lambda out, b=png: png_decode(b, out=out), f"record {i}")
            rows.fill("y", i, lambda out, v=label: np.asarray(v, np.int64), f"record {i}")
            rows.fill("name", i, lambda out, v=name: v, f"record {i}")

    with ThreadPoolExecutor(2) as pool:
        batch = decode_into_batch(decode, spec, ["x", "y", "name"], records, pool)
    np.testing.assert_array_equal(batch["x"], tiles)
    np.testing.assert_array_equal(batch["y"], np.arange(40))
    assert batch["name"].to_str_list() == [f"tile {i}" for i in range(40)]


def test_a_value_of_another_shape_is_an_error_naming_the_record_not_a_broadcast() -> None:
    spec = _spec(3)
    rows = BatchRows(spec, ["x"], 3)
    tile = _tiles(1)[0]
    rows.fill("x", 0, lambda out: tile, "a.tar: sample 'k0', field 'x'")
    with pytest.raises(
        CodecIOError, match=r"a\.tar: sample 'k1', field 'x': holds uint8 \(64, 3\)"
    ):
        rows.fill("x", 1, lambda out: tile[0], "a.tar: sample 'k1', field 'x'")  # would broadcast
    with pytest.raises(CodecIOError, match="sample 'k2', field 'x': holds nothing"):
        rows.fill("x", 2, lambda out: None, "a.tar: sample 'k2', field 'x'")
    np.testing.assert_array_equal(rows.batch()["x"][0], tile)
