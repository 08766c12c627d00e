"""Test data built in code from real images: the dtypes and field kinds a codec is
tested with, photo tiles and their colour-histogram features, and the small dataset
the sharded suite cuts into shards."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..model import Bytes, Image, Kind, Ragged, String, StringList

__all__ = [
    "dtype_cases",
    "kind_cases",
    "photo_features",
    "sample_values",
    "sharded_data",
]

#: Every dtype the data model carries (byte orders included).
dtype_cases = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    ">i4",
    ">f8",
    ">u2",
]


def sample_values(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values that exercise a dtype's range (extremes, NaN/inf for floats)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        arr = rng.integers(
            info.min, info.max, size=shape, dtype=dt.newbyteorder("="), endpoint=True
        )
        flat = arr.reshape(-1)
        if flat.size >= 2:
            flat[0], flat[1] = info.min, info.max
        return arr.astype(dt)
    if dt.kind == "f":
        arr = (rng.standard_normal(shape) * 100).astype(dt)
        flat = arr.reshape(-1)
        specials = [np.nan, np.inf, -np.inf, -0.0, np.finfo(dt).max, np.finfo(dt).tiny]
        flat[: min(len(specials), flat.size)] = specials[: flat.size]
        return arr
    real = rng.standard_normal(shape)
    return (real + 1j * rng.standard_normal(shape)).astype(dt)


def _png(img: np.ndarray) -> bytes:
    from ..images.png import png_encoder

    return bytes(png_encoder("6")(np.ascontiguousarray(img)))


def kind_cases() -> dict[str, tuple[Kind, list[Any]]]:
    """One case per field kind a codec may declare: the kind and records that
    exercise it (empty records, trailing NULs, non-ASCII, varying sizes)."""
    rng = np.random.default_rng(7)
    tiles = _cached_tiles()[0]
    sizes = [(8, 8), (12, 5), (1, 9), (16, 16)]
    return {
        "string": (String(), ["a", "", "bé", "日本語 text", "x" * 300, "tab\tend"]),
        # NUL is valid UTF-8, but some formats' strings end at it (HDF5 vlen strings)
        "string-nul": (String(), ["trailing\x00", "\x00", "mid\x00dle", ""]),
        "bytes": (Bytes(), [b"\x00", b"", b"\xff\x00\x00", bytes(range(256)), b"z"]),
        # the Object Detection API's class text: 0..n strings per record
        "string-list": (
            StringList(),
            [["cat", "dog"], [], ["é", "", "日本"], ["x" * 70], [], ["a"] * 20],
        ),
        "bytes-list": (StringList(text=False), [[b"\x00\xff", b""], [], [bytes(range(9))]]),
        "ragged-boxes": (
            Ragged(np.dtype("float32"), (4,)),
            [rng.random((n, 4)).astype(np.float32) for n in (2, 0, 5, 1, 0, 20)],
        ),
        "ragged-tokens": (
            Ragged(np.dtype("int64"), ()),
            [np.arange(n) * 7 - 3 for n in (3, 0, 1, 9)],
        ),
        "image-raw-varying": (
            Image(np.dtype("uint8"), 3),
            [np.ascontiguousarray(tiles[i, :h, :w]) for i, (h, w) in enumerate(sizes)],
        ),
        "image-png": (
            Image(np.dtype("uint8"), 3, None, None, "png"),
            [_png(tiles[i, :h, :w]) for i, (h, w) in enumerate(sizes)],
        ),
    }


def photo_features(n: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Real-image features: per-tile colour histograms (float32) and integer labels."""
    from ..demo import photo_tiles

    x, y = photo_tiles(n, 32, seed=seed)
    bins = np.stack(
        [np.histogram(t[..., c], bins=16, range=(0, 256))[0] for t in x for c in range(3)]
    ).reshape(n, 48)
    return (bins / (32 * 32)).astype(np.float32), y.argmax(1).astype(np.int64)


@functools.lru_cache(maxsize=1)
def _cached_tiles() -> tuple[np.ndarray, np.ndarray]:
    from ..demo import photo_tiles

    return photo_tiles(60, 64)


@functools.lru_cache(maxsize=1)
def _cached_features() -> tuple[np.ndarray, np.ndarray]:
    return photo_features()


def sharded_data(train: int = 96, test: int = 24) -> dict[str, dict[str, np.ndarray]]:
    """Two splits of real-image features ``f`` (float32 histograms), labels ``y`` and
    each record's number ``k`` (int64), small enough to cut into a few shards fast."""
    feats, labels = _cached_features()
    assert train + test <= len(feats), "photo_features holds 120 records"
    cut = {"train": slice(0, train), "test": slice(train, train + test)}
    return {
        split: {
            "f": feats[rows],
            "y": labels[rows],
            "k": np.arange(rows.stop - rows.start, dtype=np.int64),
        }
        for split, rows in cut.items()
    }
