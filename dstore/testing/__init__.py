"""Reusable tests and test helpers (needs pytest; imported here, never by ``import dstore``).

- :class:`CodecSuite` (:mod:`.suite`): the round-trip checks every codec passes;
- :class:`ShardedCodecSuite` (:mod:`.sharded`): what every sharded format passes on top
  (resume, manifest damage, Dask, the shard cache, record indexes, byte-identical runs);
- :mod:`.data`: test data built from real images; :mod:`.checks`: datasets and outputs
  compared byte for byte; :mod:`.formats`: the formats a test runs over, from the
  registry; :mod:`.children`: a conversion in a child process stopped step by step.

Built-in codecs run the suites from ``tests/test_roundtrip.py`` and
``tests/test_sharded_suite.py``; a third-party codec gets the same checks with::

    class TestMyCodec(dstore.testing.CodecSuite):
        @pytest.fixture
        def codec(self):
            with dstore.testing.registered_codec(MyCodec):
                yield MyCodec()

(and ``ShardedCodecSuite`` too for a :class:`~dstore.sharding.ShardedCodec`).
"""

from __future__ import annotations

from .checks import (
    append_leftovers,
    assert_columns_equal,
    assert_datasets_equal,
    cli_command,
    data_loader,
    file_digests,
    read_all,
)
from .children import ConversionChild
from .data import (
    _cached_features,
    _cached_tiles,
    _png,
    dtype_cases,
    kind_cases,
    photo_features,
    sample_values,
    sharded_data,
)
from .formats import parts_options, registered_codec, sharded_codec_names, usable_formats
from .sharded import MANIFEST_DAMAGE, ShardedCodecSuite
from .sharded_base import SHARD_RECORDS, shard_options
from .suite import CodecSuite, codec_options

__all__ = [
    "MANIFEST_DAMAGE",
    "SHARD_RECORDS",
    "CodecSuite",
    "ConversionChild",
    "ShardedCodecSuite",
    "_cached_features",
    "_cached_tiles",
    "_png",
    "append_leftovers",
    "assert_columns_equal",
    "assert_datasets_equal",
    "cli_command",
    "codec_options",
    "data_loader",
    "dtype_cases",
    "file_digests",
    "kind_cases",
    "parts_options",
    "photo_features",
    "read_all",
    "registered_codec",
    "sample_values",
    "shard_options",
    "sharded_codec_names",
    "sharded_data",
    "usable_formats",
]
