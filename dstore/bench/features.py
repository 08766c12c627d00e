"""What the probe sees of a record: features computed batch by batch.

Image fields (uint8/uint16 ``(H, W[, C])`` records) are described by
:func:`image_features`: coarse colour histograms plus histograms of gradient
orientation, gradient magnitude and Laplacian magnitude. The last two see the
fine texture that JPEG removes, which average-pooling to 8x8 averaged away.
Other arrays are flattened (grids average-pooled to at most 8x8), in the dtype
they are stored in where scikit-learn takes it (:func:`probe_matrix`). The
segmentation probe describes seeded pixels of each tile (:func:`pixel_features`).
Every function works on a batch of records, so the probe never holds the data.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "SEG_PIXELS",
    "image_features",
    "is_image_batch",
    "pixel_features",
    "pixel_positions",
    "probe_matrix",
]

#: Pixels sampled per tile by the segmentation probe: about this many training pixels
#: in all, between the two bounds per tile.
SEG_PIXELS, SEG_PIXELS_MIN, SEG_PIXELS_MAX = 65536, 16, 256


def is_image_batch(x: object) -> bool:
    """uint8/uint16 records shaped ``(H, W)`` or ``(H, W, 1|3|4)``, at least 8 pixels a side."""
    if not isinstance(x, np.ndarray):  # strings and ragged fields are columns, not images
        return False
    if x.dtype.kind != "u" or x.dtype.itemsize > 2 or x.ndim not in (3, 4):
        return False
    return min(x.shape[1:3]) >= 8 and (x.ndim == 3 or x.shape[3] in (1, 3, 4))


def _hist(values: np.ndarray, bins: int) -> np.ndarray:
    """Per-record normalised histogram of integer bin indices ``(n, ...)`` in ``[0, bins)``."""
    n = len(values)
    flat = values.reshape(n, -1)
    offsets = (np.arange(n) * bins)[:, None]
    counts = np.bincount((flat + offsets).ravel(), minlength=n * bins).reshape(n, bins)
    return counts.astype(np.float32) / flat.shape[1]


def _log_bins(magnitude: np.ndarray, bins: int = 16) -> np.ndarray:
    """Half-octave bins of a non-negative magnitude (0..255 scale): fine texture to edges."""
    return np.clip((np.log2(magnitude + 1) * 2).astype(np.int64), 0, bins - 1)


#: Tiles larger than this a side are described by their central window of this size:
#: JPEG's damage is alike all over a tile, and a 256x256 tile then costs a quarter.
WINDOW = 128


def _window(x: np.ndarray) -> np.ndarray:
    h, w = x.shape[1:3]
    top, left = max(0, (h - WINDOW) // 2), max(0, (w - WINDOW) // 2)
    return x[:, top : top + WINDOW, left : left + WINDOW]


def image_features(x: np.ndarray, chunk: int = 16) -> np.ndarray:
    """Per image: colour (4 bins per channel) and texture histograms, float32.

    Texture: gradient orientation (9 bins, magnitude-weighted), gradient and
    Laplacian magnitude (16 half-octave bins each) of the grey image. JPEG's
    loss is mostly fine texture, which these see; colour alone does not.
    Tiles larger than :data:`WINDOW` pixels a side are described by their central
    window. Works ``chunk`` images at a time, so memory stays bounded on big tiles.
    """
    x = _window(x)
    out = []
    for i in range(0, len(x), chunk):
        block = x[i : i + chunk].astype(np.float32)
        if x.dtype.itemsize == 2:
            block /= 257.0  # uint16 -> the 0..255 scale the bins assume
        if block.ndim == 3:
            block = block[..., None]
        n = len(block)
        raw = x[i : i + chunk] if x.ndim == 4 else x[i : i + chunk, ..., None]
        # the 0..255 scale's quarters, in integers (a float floor division costs 5x more)
        colour = raw >> 6 if x.dtype.itemsize == 1 else raw // (257 * 64)
        feats = [_hist(colour[..., c], 4) for c in range(block.shape[3])]
        grey = block[..., :3].mean(axis=3)
        gy = np.diff(grey, axis=1)[:, :, :-1]
        gx = np.diff(grey, axis=2)[:, :-1, :]
        magnitude = np.hypot(gx, gy)
        angle = np.mod(np.arctan2(gy, gx), np.pi)
        orient = np.minimum((angle * (9 / np.pi)).astype(np.int64), 8)
        offsets = (np.arange(n) * 9)[:, None]
        weighted = np.bincount(
            (orient.reshape(n, -1) + offsets).ravel(),
            weights=magnitude.reshape(n, -1).ravel(),
            minlength=n * 9,
        ).reshape(n, 9)
        feats.append((weighted / (weighted.sum(axis=1, keepdims=True) + 1e-6)).astype(np.float32))
        feats.append(_hist(_log_bins(magnitude), 16))
        laplace = np.abs(
            4 * grey[:, 1:-1, 1:-1]
            - grey[:, :-2, 1:-1]
            - grey[:, 2:, 1:-1]
            - grey[:, 1:-1, :-2]
            - grey[:, 1:-1, 2:]
        )
        feats.append(_hist(_log_bins(laplace), 16))
        out.append(np.concatenate(feats, axis=1))
    return np.concatenate(out) if out else np.empty((0, 0), np.float32)


def _pool(x: np.ndarray, max_side: int = 8) -> np.ndarray:
    """Average-pool non-image grids (float ``(N, H, W, ...)`` arrays) to at most ``max_side``."""
    n, h, w = x.shape[:3]
    fh, fw = -(-h // max_side), -(-w // max_side)
    hh, ww = (h // fh) * fh, (w // fw) * fw
    x = x[:, :hh, :ww].astype(np.float32)
    return x.reshape(n, hh // fh, fh, ww // fw, fw, *x.shape[3:]).mean(axis=(2, 4))


def probe_matrix(x: np.ndarray) -> np.ndarray:
    """The probe's input: one row per record, in the stored dtype where scikit-learn takes it.

    float64 stays float64 and float32 float32; anything narrower (float16,
    bfloat16, integers) widens to float32 only, so a float16 cell's training time
    is not that of a silent float64 copy.
    """
    x = np.asarray(x)
    if is_image_batch(x):
        return image_features(x)
    if x.ndim >= 3 and min(x.shape[1:3]) > 8:
        x = _pool(x)
    x = x.reshape(len(x), -1)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def pixel_positions(n: int, h: int, w: int, per_tile: int, seed: int) -> np.ndarray:
    """``(n, per_tile, 2)`` seeded (row, column) positions: the same for the same shapes,
    so the original and every round trip are scored on the very same pixels."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, h, (n, per_tile)), rng.integers(0, w, (n, per_tile))], -1)


def pixel_features(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per sampled pixel: its channels, its 5x5 neighbourhood's mean channels and grey
    standard deviation, and its position (row / H, column / W).

    Gathered at the sampled positions only (clipped at the tile's edge), so memory
    is the sample's, not a padded float copy of every tile. float64 data stays
    float64, anything else becomes float32 (as :func:`probe_matrix`).
    """
    n, h, w = x.shape[:3]
    tiles = x.reshape(n, h, w, -1)
    idx = np.arange(n)[:, None]
    rows, cols = pos[..., 0], pos[..., 1]
    centre = tiles[idx, rows, cols].astype(np.float64)
    total = np.zeros_like(centre)
    grey_sum = np.zeros(rows.shape)
    grey_sq = np.zeros(rows.shape)
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            r, c = np.clip(rows + dy, 0, h - 1), np.clip(cols + dx, 0, w - 1)
            v = tiles[idx, r, c].astype(np.float64)
            total += v
            grey = v.mean(axis=-1)
            grey_sum += grey
            grey_sq += grey * grey
    spread = np.sqrt(np.maximum(grey_sq / 25 - (grey_sum / 25) ** 2, 0.0))
    feats = np.concatenate(
        [centre, total / 25, spread[..., None], (rows / h)[..., None], (cols / w)[..., None]],
        axis=-1,
    )
    out = feats.reshape(n * pos.shape[1], -1)
    return out if x.dtype == np.float64 else out.astype(np.float32)
