"""Reusable tests every codec must pass: subclass :class:`CodecSuite` and provide ``codec``.

Built-in codecs run it from ``tests/test_roundtrip.py``; a third-party codec
gets the same checks with::

    class TestMyCodec(dstore.testing.CodecSuite):
        @pytest.fixture
        def codec(self):
            return MyCodec()

Needs pytest (imported here, never by ``import dstore``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
from typing import Any

import numpy as np
import pytest

from .. import api
from ..abc import Codec
from ..engine.dtypes import DtypePolicy
from ..errors import UnsupportedDtypeError
from ..fs import sha256_file
from ..model import Bytes, Column, Image, Kind, Ragged, String, StringList, VarColumn
from ..model.schema import DEFAULT_SPLIT

__all__ = [
    "CodecSuite",
    "assert_columns_equal",
    "assert_datasets_equal",
    "cli_command",
    "data_loader",
    "dtype_cases",
    "file_digests",
    "kind_cases",
    "parts_options",
    "read_all",
    "usable_formats",
]


def usable_formats(*, text: bool = False) -> dict[str, str]:
    """Name -> default extension of every registered codec whose dependencies are
    installed (formats that store values as text too with ``text=True``).

    Cross-format tests iterate this, never a list of their own, so registering a
    codec is what puts it through them."""
    from ..registry import available_codecs, default_extension, get_codec_class

    return {
        name: default_extension(name)
        for name, hint in available_codecs().items()
        if hint is None and (text or not get_codec_class(name).stores_text)
    }


def parts_options(name: str, *, shard_mb: float, chunk_mb: float) -> dict[str, str]:
    """Options that cut an output of codec ``name`` into small parts (shards of
    ``shard_mb``, chunks of ``chunk_mb``), so that small test data still spans many
    of them; {} for a format with neither option."""
    from ..registry import get_codec_class

    cls = get_codec_class(name)
    fields = (
        {f.name for f in dataclasses.fields(cls.Options)}
        if dataclasses.is_dataclass(cls.Options)
        else set()
    )
    wanted = {"shard_mb": shard_mb, "chunk_mb": chunk_mb}
    return {key: str(mb) for key, mb in wanted.items() if key in fields}


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


def file_digests(path: str | os.PathLike[str]) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of ``path`` itself), by relative name:
    equal dicts mean byte-identical outputs."""
    path = os.fspath(path)
    files = (
        [path]
        if os.path.isfile(path)
        else sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
    )
    return {
        os.path.relpath(name, path) if name != path else os.path.basename(path): sha256_file(name)[
            1
        ]
        for name in files
    }


def cli_command(*argv: str) -> list[str]:
    """``python -m dstore.cli ARGV`` in which Ctrl-C (SIGINT) raises KeyboardInterrupt
    even when the tests run in a background job, whose children start with SIGINT
    ignored: a test that interrupts a run then tests dstore, not the shell."""
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from dstore.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, *argv]


def read_all(path: str) -> dict[str, dict[str, Column]]:
    with api.open(path) as ds:
        return {split: ds[split].read() for split in ds}


def assert_columns_equal(exp: Any, act: Any, where: Any = "") -> None:
    """Same kind of column, dtype, shape and bytes (NaNs compared by bit pattern)."""
    if isinstance(exp, VarColumn) or isinstance(act, VarColumn):
        assert isinstance(exp, VarColumn) and isinstance(act, VarColumn), (
            where,
            type(exp),
            type(act),
        )
        if isinstance(exp.values, VarColumn) or isinstance(act.values, VarColumn):
            assert act.lengths.tolist() == exp.lengths.tolist(), (where, "list lengths")
            assert_columns_equal(exp.values, act.values, (where, "strings"))
            return
        assert act.values.dtype == exp.values.dtype, (where, act.values.dtype, exp.values.dtype)
        assert act.values.shape[1:] == exp.values.shape[1:], (
            where,
            act.values.shape,
            exp.values.shape,
        )
        assert act.lengths.tolist() == exp.lengths.tolist(), (where, "record lengths")
        assert (
            np.ascontiguousarray(act.values).tobytes() == np.ascontiguousarray(exp.values).tobytes()
        ), where
        assert (act.shapes is None) == (exp.shapes is None), (where, "shapes")
        if exp.shapes is not None and act.shapes is not None:
            assert act.shapes.tolist() == exp.shapes.tolist(), (where, "record shapes")
        return
    assert act.dtype == exp.dtype, (where, act.dtype, exp.dtype)
    assert act.shape == exp.shape, (where, act.shape, exp.shape)
    assert np.ascontiguousarray(act).tobytes() == np.ascontiguousarray(exp).tobytes(), where


def assert_datasets_equal(
    expected: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]]
) -> None:
    """Same splits, fields, dtypes, shapes and bytes (NaNs compared by bit pattern)."""
    assert sorted(expected) == sorted(actual)
    for split, fields in expected.items():
        assert sorted(fields) == sorted(actual[split]), split
        for name, exp in fields.items():
            assert_columns_equal(exp, actual[split][name], (split, name))


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


def _opts(codec: Codec) -> dict[str, Any]:
    return {k: v for k, v in codec.get_config().items() if k != "name"}


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


class CodecSuite:
    """Round-trip checks for one codec; subclasses provide the ``codec`` fixture."""

    @pytest.fixture
    def codec(self) -> Codec:  # pragma: no cover - overridden
        raise NotImplementedError

    @pytest.fixture
    def tiles(self) -> tuple[np.ndarray, np.ndarray]:
        return _cached_tiles()

    @pytest.fixture
    def features(self) -> tuple[np.ndarray, np.ndarray]:
        return _cached_features()

    def _path(self, tmp_path: Any, codec: Codec, stem: str = "out") -> str:
        return os.path.join(str(tmp_path), stem + codec.extensions[0])

    def test_roundtrip_tiles_and_labels(self, codec: Codec, tmp_path: Any, tiles: Any) -> None:
        x, y = tiles
        data = {"train": {"x": x[:40], "y": y[:40]}, "test": {"x": x[40:], "y": y[40:]}}
        path = self._path(tmp_path, codec)
        api.save(data, path, format=codec.name, **_opts(codec))
        assert_datasets_equal(data, read_all(path))

    @pytest.mark.parametrize("dtype", dtype_cases)
    def test_roundtrip_every_dtype(self, codec: Codec, tmp_path: Any, dtype: str) -> None:
        data = {
            "train": {
                "scalar": sample_values(dtype, (7,)),
                "vector": sample_values(dtype, (7, 5), seed=1),
                "matrix": sample_values(dtype, (7, 2, 3), seed=2),
            }
        }
        path = self._path(tmp_path, codec)
        if not codec.supports(np.dtype(dtype)):
            with pytest.raises(UnsupportedDtypeError):
                api.save(data, path, format=codec.name)
            assert not os.path.exists(path)
            return
        api.save(data, path, format=codec.name, **_opts(codec))
        assert_datasets_equal(data, read_all(path))

    @pytest.mark.parametrize("batch_bytes", [1, 100, 10_000, 1 << 30])
    def test_batch_size_does_not_change_output(
        self, codec: Codec, tmp_path: Any, batch_bytes: int, features: Any
    ) -> None:
        feats, labels = features
        src = os.path.join(str(tmp_path), "src.npz")
        api.save({"feats": feats[:50], "labels": labels[:50]}, src)
        path = self._path(tmp_path, codec)
        api.convert(src, path, to=codec.name, batch_bytes=batch_bytes, options=_opts(codec))
        got = read_all(path)
        assert_datasets_equal({DEFAULT_SPLIT: {"feats": feats[:50], "labels": labels[:50]}}, got)

    def test_empty_split_and_zero_size_records(self, codec: Codec, tmp_path: Any) -> None:
        data = {
            "train": {
                "a": np.arange(6, dtype=np.int32).reshape(3, 2),
                "b": np.zeros((3, 0), np.float32),
            },
            "test": {"a": np.zeros((0, 2), np.int32), "b": np.zeros((0, 0), np.float32)},
        }
        path = self._path(tmp_path, codec)
        api.save(data, path, format=codec.name, **_opts(codec))
        assert_datasets_equal(data, read_all(path))

    def test_ragged_records_of_empty_rows_round_trip_or_are_refused(
        self, codec: Codec, tmp_path: Any
    ) -> None:
        """Records (2, 0) and (3, 0): kept with their row counts, or refused before a
        byte is written by a format that stores a record as its values only."""
        records = [np.zeros((2, 0), np.float32), np.zeros((3, 0), np.float32)]
        data = {"train": {"f": records}}
        kinds = {("train", "f"): Ragged(np.dtype(np.float32), (0,))}
        path = self._path(tmp_path, codec)
        if Ragged not in codec.kinds or not codec.keeps_empty_rows:
            with pytest.raises(UnsupportedDtypeError):
                api.save(data, path, format=codec.name, kinds=kinds, **_opts(codec))
            assert os.listdir(str(tmp_path)) == []
            return
        api.save(data, path, format=codec.name, kinds=kinds, **_opts(codec))
        with api.open(path) as ds:
            assert [ds["train"]["f"][i].shape for i in range(2)] == [(2, 0), (3, 0)]

    def test_random_access_reads_only_the_slice(
        self, codec: Codec, tmp_path: Any, features: Any
    ) -> None:
        feats, labels = features
        path = self._path(tmp_path, codec)
        api.save({"train": {"f": feats, "y": labels}}, path, format=codec.name, **_opts(codec))
        with api.open(path) as ds:
            np.testing.assert_array_equal(ds["train"]["f"][10:13], feats[10:13])
            np.testing.assert_array_equal(ds["train"]["y"][-1], labels[-1])
            np.testing.assert_array_equal(ds["train"]["f"][5:50:7], feats[5:50:7])

    @pytest.mark.parametrize("case", list(kind_cases()))
    def test_roundtrip_every_kind(self, codec: Codec, tmp_path: Any, case: str) -> None:
        """Each kind the codec declares round-trips record by record; any other
        kind is refused before a byte is written."""
        kind, records = kind_cases()[case]
        labels = np.arange(len(records), dtype=np.int64)
        data = {"train": {"f": records, "label": labels}}
        path = self._path(tmp_path, codec)
        kinds = {("train", "f"): kind}
        if not isinstance(kind, codec.kinds):
            with pytest.raises(UnsupportedDtypeError, match="not supported by this format"):
                api.save(data, path, format=codec.name, kinds=kinds, **_opts(codec))
            assert os.listdir(str(tmp_path)) == []
            return
        try:
            api.save(data, path, format=codec.name, kinds=kinds, **_opts(codec))
        except UnsupportedDtypeError as e:
            if case != "string-nul" or "NUL" not in str(e):
                raise
            assert os.listdir(str(tmp_path)) == []  # refused clearly, nothing left behind
            return
        with api.open(path) as ds:
            field = ds["train"]["f"]
            assert field.kind == kind, (field.kind, kind)
            got = [field[i] for i in range(len(records))]
            sliced = field[1:3]  # a slice of a field whose records vary is a list of records
            assert isinstance(sliced, list) and len(sliced) == 2
            for a, b in zip(sliced, got[1:3], strict=True):
                assert type(a) is type(b) and (
                    a.tobytes() == b.tobytes() if isinstance(a, np.ndarray) else a == b
                )
            np.testing.assert_array_equal(ds["train"]["label"][:], labels)
        for i, (want, have) in enumerate(zip(records, got, strict=True)):
            if isinstance(want, np.ndarray):
                assert isinstance(have, np.ndarray) and have.dtype == want.dtype, (i, have)
                assert have.shape == want.shape and have.tobytes() == want.tobytes(), i
            else:
                assert type(have) is type(want) and have == want, (i, have, want)

    def test_config_roundtrip(self, codec: Codec) -> None:
        config = codec.get_config()
        assert json.loads(json.dumps(config)) == config
        assert type(codec).from_config(config) == codec

    def test_failed_write_leaves_nothing(self, codec: Codec, tmp_path: Any) -> None:
        data = {"train": {"x": np.full((5, 3), 1e10, np.float64)}}
        path = self._path(tmp_path, codec)
        with pytest.raises(Exception, match="overflow"):
            api.save(data, path, format=codec.name, dtype=DtypePolicy("float16"))
        assert os.listdir(str(tmp_path)) == []

    def test_float16_policy(self, codec: Codec, tmp_path: Any, features: Any) -> None:
        feats, labels = features
        path = self._path(tmp_path, codec)
        api.save({"f": feats, "y": labels}, path, format=codec.name, dtype="float16")
        got = read_all(path)[DEFAULT_SPLIT]
        f = got["f"]
        assert isinstance(f, np.ndarray) and f.dtype == np.float16, type(f)
        np.testing.assert_array_equal(f, feats.astype(np.float16))
        np.testing.assert_array_equal(got["y"], labels)


def data_loader(dataset: Any, **kwargs: Any) -> Any:
    """:func:`dstore.readers.torch.data_loader`: a DataLoader started as a user must
    start one for the dataset's format."""
    from ..readers.torch import data_loader as make

    return make(dataset, **kwargs)
