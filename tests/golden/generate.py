"""Write the golden files: small datasets of every format and field kind, as this version writes them.

numcodecs keeps files written by old versions and decodes them in every new
one (its ``fixture/`` folder); this is the same idea. Run it after adding a
format or kind::

    python tests/golden/generate.py

It only ADDS files that do not exist yet, under ``tests/golden/<version>/``:
files written by an earlier version are never rewritten, so every later
version keeps proving it reads them (``tests/test_golden.py``). The data comes
from :func:`golden_data` (deterministic), which the test rebuilds to compare.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def golden_data() -> dict[str, dict[str, dict[str, Any]]]:
    """Case name -> dataset (split -> field -> values), small and deterministic."""
    rng = np.random.default_rng(20261203)
    # a smooth image so PNG and deflate behave as on photos (no network, no files)
    yy, xx = np.mgrid[0:16, 0:16]
    tiles = np.stack(
        [
            np.stack([(xx * 13 + i * 7) % 256, (yy * 11 + i) % 256, (xx * yy + i * 3) % 256], -1)
            for i in range(6)
        ]
    ).astype(np.uint8)
    labels = np.eye(3, dtype=np.uint8)[[0, 1, 2, 0, 1, 2]]
    feats = rng.standard_normal((6, 5)).astype(np.float32)
    return {
        "tiles": {
            "train": {"x": tiles[:4], "y": labels[:4]},
            "test": {"x": tiles[4:], "y": labels[4:]},
        },
        # the same tiles, written again once fpng wrote dstore's PNGs: the TFRecord shards of
        # "tiles" hold the earlier encoder's bytes, these the current one's (test_sharded.py
        # compares new shards with them byte for byte)
        "tiles_fpng": {
            "train": {"x": tiles[:4], "y": labels[:4]},
            "test": {"x": tiles[4:], "y": labels[4:]},
        },
        # and at the png_levels of issue #40 (CASE_OPTIONS), in the formats that have them
        "tiles_balanced": {
            "train": {"x": tiles[:4], "y": labels[:4]},
            "test": {"x": tiles[4:], "y": labels[4:]},
        },
        "tiles_small": {
            "train": {"x": tiles[:4], "y": labels[:4]},
            "test": {"x": tiles[4:], "y": labels[4:]},
        },
        "dtypes": {
            "data": {
                "f16": feats.astype(np.float16),
                "f32": feats,
                "f64": feats.astype(np.float64),
                "be": feats.astype(">f8"),
                "i64": rng.integers(-(2**40), 2**40, (6, 2)),
                "u16": rng.integers(0, 2**16, (6,), dtype=np.uint16),
                "b": rng.random(6) < 0.5,
                "c64": (feats[:, :2] + 1j * feats[:, 2:4]).astype(np.complex64),
            }
        },
        "kinds": {
            "train": {
                "names": ["a.png", "", "bé", "日本語", "tail\x00"],
                "blobs": [b"\x00", b"", b"\xff\xfe", bytes(range(8)), b"z"],
                "boxes": [rng.random((k, 4)).astype(np.float32) for k in (2, 0, 5, 1, 3)],
                "tokens": [np.arange(k, dtype=np.int64) * 3 - 1 for k in (0, 4, 1, 2, 7)],
            }
        },
        "text": {  # strings without NUL (HDF5 strings end at NUL) and ragged values
            "test": {
                "names": ["x", "", "ünïcode", "long " * 20],
                "boxes": [rng.random((k, 4)).astype(np.float32) for k in (0, 3, 1, 2)],
            }
        },
        "empty": {
            "train": {"a": np.zeros((0, 3), np.int32)},
            "test": {"a": np.arange(6, dtype=np.int32).reshape(2, 3)},
        },
        # names stored through dstore.model.names' escape: the rule is part of every format
        "names": {
            "../evil": {
                "image/object/bbox/xmin": feats[:, :2],
                "": np.arange(6),
                "x" * 250: np.arange(6) * 2,
            },
            "a/b": {
                "e\u0301": np.arange(6, dtype=np.int16),
                ".hidden": np.arange(6) * 3,
                "zarr.json": np.ones(6),
            },
        },
    }


#: the options a case is written with (and read back or rewritten with, in the tests); a
#: case with options is written only in the formats whose options include them all
CASE_OPTIONS: dict[str, dict[str, Any]] = {
    "tiles_balanced": {"png_level": "balanced"},
    "tiles_small": {"png_level": "small"},
}


def _takes(codec: str, options: dict[str, Any]) -> bool:
    import dataclasses

    from dstore.registry import get_codec_class

    declared = getattr(get_codec_class(codec), "Options", None)
    fields = {f.name for f in dataclasses.fields(declared)} if declared else set()
    return set(options) <= fields


def main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
    import dstore
    from dstore.registry import codec_names, default_extension

    folder = os.path.join(HERE, dstore.__version__)
    os.makedirs(folder, exist_ok=True)
    written = 0
    for case, data in golden_data().items():
        for codec in codec_names():
            path = os.path.join(folder, f"{case}{default_extension(codec)}")
            options = CASE_OPTIONS.get(case, {})
            if os.path.exists(path) or not _takes(codec, options):
                continue
            try:
                dstore.save(data, path, format=codec, **options)
            except dstore.UnsupportedDtypeError as e:
                print(f"skip {case} {codec}: {e}")
                continue
            written += 1
            print("wrote", os.path.relpath(path, HERE))
    print(f"{written} new golden file(s) in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
