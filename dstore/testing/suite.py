"""The shared suite every codec passes: subclass :class:`CodecSuite` and provide ``codec``.

Built-in codecs run it from ``tests/test_roundtrip.py``; a third-party codec
gets the same checks with::

    class TestMyCodec(dstore.testing.CodecSuite):
        @pytest.fixture
        def codec(self):
            return MyCodec()

(the codec registered, as ``dstore.register_codec`` or :func:`registered_codec` does:
the suite writes through ``dstore.save`` and ``dstore.convert`` by its name).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest

from .. import api
from ..abc import Codec
from ..engine.dtypes import DtypePolicy
from ..errors import UnsupportedDtypeError
from ..model import Ragged
from ..model.schema import DEFAULT_SPLIT
from .checks import assert_datasets_equal, read_all
from .data import _cached_features, _cached_tiles, dtype_cases, kind_cases, sample_values

__all__ = ["CodecSuite", "codec_options"]


def codec_options(codec: Codec) -> dict[str, Any]:
    """The codec's options as ``save``/``convert`` take them (its config without the name)."""
    return {k: v for k, v in codec.get_config().items() if k != "name"}


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
        api.save(data, path, format=codec.name, **codec_options(codec))
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
        api.save(data, path, format=codec.name, **codec_options(codec))
        assert_datasets_equal(data, read_all(path))

    @pytest.mark.parametrize("batch_bytes", [1, 100, 10_000, 1 << 30])
    def test_batch_size_does_not_change_output(
        self, codec: Codec, tmp_path: Any, batch_bytes: int, features: Any
    ) -> None:
        feats, labels = features
        src = os.path.join(str(tmp_path), "src.npz")
        api.save({"feats": feats[:50], "labels": labels[:50]}, src)
        path = self._path(tmp_path, codec)
        api.convert(src, path, to=codec.name, batch_bytes=batch_bytes, options=codec_options(codec))
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
        api.save(data, path, format=codec.name, **codec_options(codec))
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
                api.save(data, path, format=codec.name, kinds=kinds, **codec_options(codec))
            assert os.listdir(str(tmp_path)) == []
            return
        api.save(data, path, format=codec.name, kinds=kinds, **codec_options(codec))
        with api.open(path) as ds:
            assert [ds["train"]["f"][i].shape for i in range(2)] == [(2, 0), (3, 0)]

    def test_random_access_reads_only_the_slice(
        self, codec: Codec, tmp_path: Any, features: Any
    ) -> None:
        feats, labels = features
        path = self._path(tmp_path, codec)
        api.save(
            {"train": {"f": feats, "y": labels}}, path, format=codec.name, **codec_options(codec)
        )
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
                api.save(data, path, format=codec.name, kinds=kinds, **codec_options(codec))
            assert os.listdir(str(tmp_path)) == []
            return
        try:
            api.save(data, path, format=codec.name, kinds=kinds, **codec_options(codec))
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
