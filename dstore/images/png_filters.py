"""PNG row filters computed with numpy: what a PNG's rows become before deflate.

Each function takes the image's rows as big-endian sample bytes (``(H, N)``
uint8, :func:`image_rows`) and the bytes per pixel, and returns the filtered
rows with each row's filter type byte first (``(H, N + 1)`` uint8), as the
IDAT stream holds them. uint8 arithmetic wraps modulo 256, as PNG's does.

The choice of filter per row is a function of the pixels only (integer
arithmetic, ties broken in a fixed order), so the filtered bytes do not
depend on threads, processes or CPUs:

- :func:`up_filtered`: UP on every row (what fpng writes);
- :func:`sub_up_filtered`: SUB or UP per row, whichever has the smaller sum
  of absolute signed bytes (issue #40: on satellite tiles UP-only rows cost
  fpng 1.19x TensorFlow's bytes; SUB/UP rows with libdeflate level 1 about
  1.06x, at a tenth of the cost of :func:`adaptive_filtered`);
- :func:`adaptive_filtered`: libpng's default heuristic over all five filters
  (the same rule, so the same bytes, as libpng's).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "FILTER_SUB",
    "FILTER_UP",
    "adaptive_filtered",
    "image_rows",
    "sub_up_filtered",
    "up_filtered",
]

FILTER_NONE, FILTER_SUB, FILTER_UP, FILTER_AVERAGE, FILTER_PAETH = range(5)


def image_rows(img: np.ndarray) -> tuple[np.ndarray, int]:
    """Big-endian sample bytes per row ``(H, W * C * itemsize)`` and bytes per pixel."""
    h = img.shape[0]
    channels = img.shape[2] if img.ndim == 3 else 1
    big = np.ascontiguousarray(img, dtype=img.dtype.newbyteorder(">"))
    return big.view(np.uint8).reshape(h, -1), channels * img.dtype.itemsize


def _row_costs(rows: np.ndarray, out: np.ndarray) -> None:
    """libpng's cost of each filtered row into ``out``: the sum of its bytes read as
    signed (|-128| counts 128)."""
    magnitude = np.negative(rows)  # 256 - b, wrapping: |b as int8| is the smaller of the two
    np.minimum(rows, magnitude, out=magnitude)
    np.sum(magnitude, axis=1, dtype=np.uint32, out=out)


def up_filtered(rows: np.ndarray) -> np.ndarray:
    """Every row UP-filtered (the first against a row of zeros: its bytes unchanged)."""
    out = np.empty((rows.shape[0], rows.shape[1] + 1), np.uint8)
    out[:, 0] = FILTER_UP
    if len(rows):
        out[0, 1:] = rows[0]
        np.subtract(rows[1:], rows[:-1], out=out[1:, 1:])
    return out


def sub_up_filtered(rows: np.ndarray, bpp: int) -> np.ndarray:
    """Each row SUB- or UP-filtered, whichever costs less (:func:`_row_costs`; SUB on a tie)."""
    h, n = rows.shape
    out = np.empty((h, n + 1), np.uint8)
    out[:, 0] = FILTER_SUB
    sub = out[:, 1:]
    sub[:, :bpp] = rows[:, :bpp]
    np.subtract(rows[:, bpp:], rows[:, :-bpp], out=sub[:, bpp:])
    if not h or not n:
        return out
    up = np.empty_like(rows)
    up[0] = rows[0]
    np.subtract(rows[1:], rows[:-1], out=up[1:])
    costs = np.empty((2, h), np.uint32)
    _row_costs(sub, costs[0])
    _row_costs(up, costs[1])
    use_up = costs[1] < costs[0]
    out[use_up, 0] = FILTER_UP
    sub[use_up] = up[use_up]
    return out


def adaptive_filtered(rows: np.ndarray, bpp: int) -> np.ndarray:
    """Each row with the filter (None, Sub, Up, Average, Paeth) whose output costs least
    (:func:`_row_costs`; the first of them on a tie): libpng's default heuristic."""
    h, n = rows.shape
    out = np.empty((h, n + 1), np.uint8)
    if not h or not n:
        out[:, 0] = FILTER_NONE
        return out
    # the rows with a zero row above and zero bytes to the left: every neighbour is a view
    padded = np.zeros((h + 1, n + bpp), np.uint8)
    padded[1:, bpp:] = rows
    left, up = padded[1:, :-bpp], padded[:-1, bpp:]
    cand = np.empty((5, h, n), np.uint8)
    cand[FILTER_NONE] = rows
    np.subtract(rows, left, out=cand[FILTER_SUB])
    np.subtract(rows, up, out=cand[FILTER_UP])
    mean = left.astype(np.uint16)
    mean += up
    mean >>= 1
    np.subtract(rows, mean, out=cand[FILTER_AVERAGE], casting="unsafe")
    np.subtract(rows, _paeth_predictor(padded, bpp), out=cand[FILTER_PAETH])
    costs = np.empty((5, h), np.uint32)
    for k in range(5):
        _row_costs(cand[k], costs[k])
    choice = costs.argmin(axis=0)
    out[:, 0] = choice
    out[:, 1:] = cand[choice, np.arange(h)]
    return out


def _paeth_predictor(padded: np.ndarray, bpp: int) -> np.ndarray:
    """PNG's Paeth predictor of every byte of the rows ``padded`` holds below a zero row and
    right of ``bpp`` zero columns: left, up or up-left, whichever is closest to
    left + up - up-left (in that order on ties)."""
    left, up, up_left = padded[1:, :-bpp], padded[:-1, bpp:], padded[:-1, :-bpp]
    wide = padded.astype(np.int16)
    dist_left = wide[:-1, bpp:] - wide[:-1, :-bpp]  # |p - left| = |up - up_left|
    dist_up = wide[1:, :-bpp] - wide[:-1, :-bpp]  # |p - up| = |left - up_left|
    dist_up_left = dist_left + dist_up  # |p - up_left|
    np.abs(dist_left, out=dist_left)
    np.abs(dist_up, out=dist_up)
    np.abs(dist_up_left, out=dist_up_left)
    pick_left = dist_left <= dist_up
    pick_left &= dist_left <= dist_up_left
    pred = np.where(dist_up <= dist_up_left, up, up_left)
    np.copyto(pred, left, where=pick_left)
    return pred
