"""Issue #24: the default PNG encoder's bytes depend on the pixels only.

The same real-photo tiles are encoded on many threads, in fresh processes whose
environments differ in size (which moves the main thread's stack), and at
different C-stack depths (which moves the encoder's stack frames); every run
must produce the same bytes, and every PNG must decode back to the exact
pixels. ISA-L's level-1 deflate, the fast path before issue #17, failed this
kind of check for about one tile in thousands (its output depended on the
stream struct's stack address); ``benchmarks/bench_png_encoders.py`` runs the
long version (100,000+ encodes).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading

import imagecodecs
import numpy as np
import pytest

from dstore.demo import photo_tiles
from dstore.images import png as _png

N_TILES = 48

CHILD = textwrap.dedent(
    """
    import hashlib, sys
    import numpy as np
    from dstore.images import png as _png
    from dstore.demo import photo_tiles

    def deep(depth, fn):
        return fn() if depth <= 0 else next(map(lambda _: deep(depth - 1, fn), (0,)))

    x, _ = photo_tiles(int(sys.argv[1]), 256, seed=24)
    tiles = list(x) + [np.ascontiguousarray(t[:, :, 0]) for t in x[:4]]
    step = int(sys.argv[2])
    for i, t in enumerate(tiles):
        png = deep((i * step) % 40, lambda t=t: _png.encode_fast(t))
        print(hashlib.sha256(png).hexdigest())
    """
)


def deep(depth: int, fn):
    """``fn()`` ``depth`` C frames deeper (each ``map`` call re-enters the interpreter from C)."""
    return fn() if depth <= 0 else next(map(lambda _: deep(depth - 1, fn), (0,)))


@pytest.fixture(scope="module")
def photo_pngs() -> tuple[list[np.ndarray], list[str]]:
    """Real-photo RGB tiles (fpng's path) and gray ones (libdeflate's), and their digests."""
    x, _ = photo_tiles(N_TILES, 256, seed=24)
    tiles = list(x) + [np.ascontiguousarray(t[:, :, 0]) for t in x[:4]]
    return tiles, [hashlib.sha256(_png.encode_fast(t)).hexdigest() for t in tiles]


def test_png_decodes_to_the_exact_pixels(photo_pngs) -> None:
    tiles, _ = photo_pngs
    for t in tiles:
        png = _png.encode_fast(t)
        assert _png._decode_up(png) is not None  # the fast decoder takes what we write
        for decoded in (_png.decode(png), imagecodecs.png_decode(png)):  # ours and libpng
            assert decoded.dtype == t.dtype
            assert np.array_equal(decoded, t)
    rgba = np.dstack([tiles[0], tiles[1][:, :, :1]])
    assert np.array_equal(_png.decode(_png.encode_fast(rgba)), rgba)
    # larger than a tile: fpng writes into a memfd, not the pipe; the same encoder
    big = np.concatenate([np.concatenate(tiles[i : i + 4], axis=1) for i in (0, 4, 8)], axis=0)
    png = _png.encode_fast(big)
    assert _png._decode_up(png) is not None and np.array_equal(_png.decode(png), big)


def test_png_bytes_same_on_many_threads_and_stack_depths(photo_pngs) -> None:
    tiles, expected = photo_pngs
    threads = 8
    got: dict[tuple[int, int], str] = {}

    def work(k: int) -> None:
        for i, t in enumerate(tiles):
            png = deep((i * 7 + k * 5) % 50, lambda t=t: _png.encode_fast(t))
            got[k, i] = hashlib.sha256(png).hexdigest()

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for p in pool:
        p.start()
    for p in pool:
        p.join()
    differ = sorted((k, i) for (k, i), d in got.items() if d != expected[i])
    assert len(got) == threads * len(tiles)
    assert differ == [], f"(thread, tile) whose PNG bytes differ: {differ}"


@pytest.mark.parametrize(("env_pad", "step"), [(0, 3), (200_000, 11)])
def test_png_bytes_same_in_fresh_processes(photo_pngs, env_pad: int, step: int) -> None:
    _, expected = photo_pngs
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # one variable holds at most 128 KiB: several move the stack further
    env.update({f"DSTORE_TEST_PAD{k}": "x" * 25_000 for k in range(env_pad // 25_000)})
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(N_TILES), str(step)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    ).stdout.split()
    assert out == expected


@pytest.mark.parametrize("rows", [1, 2, 3, 130, 257])
def test_fast_unfiltering_matches_libpng_at_any_height(photo_pngs, rows: int) -> None:
    """The UP-filter prefix sum (log2(H) steps since the training-read speed-up) at heights
    that are not powers of two, 8- and 16-bit, gray and RGB, against libpng."""
    tiles, _ = photo_pngs
    tall = np.concatenate([tiles[0], tiles[1]])[:rows]
    deep16 = (tall[:, :, 0].astype(np.uint16) * 257 + 13).astype(np.uint16)
    for img in (tall, np.ascontiguousarray(tall[:, :, 1]), deep16):
        png = _png.encode_up_libdeflate(img)
        assert _png._decode_up(png) is not None
        np.testing.assert_array_equal(_png.decode(png), imagecodecs.png_decode(png))
        np.testing.assert_array_equal(_png.decode(png), img)
