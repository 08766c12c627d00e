"""From a sample to the whole data: a total and its 95% interval.

A sampled cell is measured on a small output (``tiny``: one record per split, the
cost of an output of nothing much: headers, manifests, a thread pool) and on
``k`` disjoint parts of the seeded sample, each stratified by split. Every
figure (bytes, write or read seconds, loader seconds) is taken to be a fixed
cost plus a cost per record; each part gives one estimate of the per-record
cost, ``(x_part - x_tiny) / (m_part - t)``, and the total for ``N`` records is

    x_tiny + mean(rate) * (N - t)

with the interval ``t_{k-1} * sd(rate) / sqrt(k) * sqrt(1 - n/N) * (N - t)``:
Student's t over the parts (their records and their timing noise both vary
between them), with the finite-population correction for a sample of ``n`` of
the ``N`` records. A full run (no sample) has no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Estimate", "extrapolate", "extrapolate_ratio", "t_quantile"]

#: Student's t, 97.5% quantile, for 1..12 degrees of freedom (the parts minus one);
#: beyond, 2.0 (the normal's 1.96, rounded up).
_T975 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18)


def t_quantile(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    return _T975[df - 1] if df <= len(_T975) else 2.0


@dataclass(frozen=True)
class Estimate:
    """A figure for the whole data and its 95% interval (NaN bounds: measured, not estimated)."""

    value: float
    lo: float = math.nan
    hi: float = math.nan

    @property
    def extrapolated(self) -> bool:
        return not math.isnan(self.lo)

    @property
    def relative_half_width(self) -> float:
        """Half the interval over the value (0.03: +/- 3%); NaN when measured."""
        if not self.extrapolated or not self.value:
            return math.nan
        return (self.hi - self.lo) / 2 / abs(self.value)


def extrapolate(
    total: int, tiny: tuple[int, float] | None, parts: Sequence[tuple[int, float]]
) -> Estimate:
    """``total`` records' figure from ``tiny = (t, x)`` and ``parts = [(m, x), ...]``.

    Each ``m`` must exceed ``t``. ``tiny`` None: no fixed cost (sizes: an output's
    own bytes -- headers, a manifest -- are a few kB, while the tiny output's one
    record per split would bring that record's own size, times ``total / m``, into
    the estimate). With one part the interval is unbounded (no spread to judge by);
    the caller plans at least three.
    """
    t, x_tiny = tiny if tiny is not None else (0, 0.0)
    rates = [(x - x_tiny) / (m - t) for m, x in parts if m > t]
    if not rates:
        raise ValueError("extrapolate needs a part larger than the tiny output")
    sampled = sum(m for m, _ in parts)
    rate = statistics.fmean(rates)
    value = x_tiny + rate * (total - t)
    # the figure never falls below what the largest part alone measured
    value = max(value, *(x for _, x in parts))
    if len(rates) < 2:
        return Estimate(value, -math.inf, math.inf)
    fpc = math.sqrt(max(0.0, 1 - sampled / total)) if total else 0.0
    se = statistics.stdev(rates) / math.sqrt(len(rates)) * fpc
    half = t_quantile(len(rates) - 1) * se * (total - t)
    return Estimate(value, value - half, value + half)


def extrapolate_ratio(
    sampled: int,
    total: int,
    parts: Sequence[tuple[float, float]],
    proxy_total: float,
    tiny: tuple[float, float] | None = None,
) -> Estimate:
    """A total from ``parts = [(x, proxy), ...]`` by the ratio of ``x`` to a proxy known
    for every record (:func:`dstore.bench.sample.size_proxy`): ``proxy_total * sum(x) /
    sum(proxy)``, with the interval of a ratio estimator (the parts' residuals from the
    common ratio, Student's t, the finite-population correction for ``sampled`` of
    ``total`` records). Records big or small by luck of the draw move ``x`` and the
    proxy together, so they hardly move the estimate. ``tiny = (x, proxy)``: an output
    of a few records, whose ``x`` beyond what its proxy accounts for is each output's
    fixed part (headers, metadata): counted once in the total, not once per part."""
    if tiny is not None:
        first = sum(x for x, _ in parts) / sum(p for _, p in parts)
        fixed = max(0.0, tiny[0] - first * tiny[1])
        est = extrapolate_ratio(sampled, total, [(x - fixed, p) for x, p in parts], proxy_total)
        return Estimate(est.value + fixed, est.lo + fixed, est.hi + fixed)
    xs = [x for x, _ in parts]
    ps = [p for _, p in parts]
    ratio = sum(xs) / sum(ps)
    value = proxy_total * ratio
    if len(parts) < 2:
        return Estimate(value, -math.inf, math.inf)
    residual = math.sqrt(sum((x - ratio * p) ** 2 for x, p in parts) / (len(parts) - 1))
    fpc = math.sqrt(max(0.0, 1 - sampled / total)) if total else 0.0
    half = (
        t_quantile(len(parts) - 1) * proxy_total / sum(ps) * math.sqrt(len(parts)) * residual * fpc
    )
    return Estimate(value, value - half, value + half)
