"""What ``dstore bench`` measured: one :class:`Cell` per format x image choice x dtype
policy (x codec setting), and the :class:`BenchReport` holding them.

Plain records, below both the harness that fills them and the report that prints
them, so neither imports the other. Every figure is for the whole data: a cell
measured on a sample holds the extrapolated figure and, in ``intervals``, its 95%
interval (:mod:`.extrapolate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .tasks import Task

__all__ = ["BenchReport", "Cell"]


@dataclass
class Cell:
    """One measured configuration."""

    format: str
    dtype: str
    options: dict[str, Any]
    images: str = "png"  # the --images choice ("-": no image field); -o options in image_options
    image_options: dict[str, Any] = field(default_factory=dict)
    stored: str = ""  # what is stored: "PNG", "JPEG q90", "raw + blosc zstd 3"
    bytes: int = 0
    raw_bytes: int = 0
    records: int = 0
    sampled: int = 0  # records measured when sampled (0: every record)
    write_s: float = float("nan")
    read_s: float = float("nan")
    write_cpu_s: float = float("nan")  # CPU seconds of the writes (threads and workers too)
    read_cpu_s: float = float("nan")
    #: 95% intervals of extrapolated figures: {"bytes": [lo, hi], "write_s": ..., ...}
    intervals: dict[str, list[float]] = field(default_factory=dict)
    #: a cell measured whole: the fastest and slowest of its timed repeats, per figure
    repeat_range: dict[str, list[float]] = field(default_factory=dict)
    peak_write_mb: float = float("nan")  # peak RSS of the process that wrote (MiB)
    loader_rps: float = float("nan")  # --read: the training loader's records/s, storage order
    loader_mbps: float = float("nan")  # --read: its MB/s of the cell's bytes
    loader_cold_rps: float = float("nan")  # --read: records/s after a page-cache drop
    shuffled_rps: float = float("nan")  # --read: records/s with shuffle="global"
    #: --read: MosaicML's shuffle quality of the shuffled pass's order (.shuffle)
    shuffle_quality: float = float("nan")
    ordered_quality: float = float("nan")  # the same, of the storage-order pass
    permutation_quality: float = float("nan")  # a uniform permutation's, of as many records
    shuffle_note: str = ""  # why there is no shuffled figure
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    exact: bool = False  # every value read back equal to the original's
    bit_exact: bool = False  # ... and in the same dtype, byte for byte
    differs: str = ""  # a difference that is not a number's (a string, a shape)
    accuracy: float = float("nan")
    accuracy_delta: float = float("nan")  # points against the original data
    probe_s: float = float("nan")  # the probe's (or evaluate's) training time
    probe_dtype: str = ""  # the dtype the probe trained on
    probe_reused: str = ""  # whose score this is when the probe's records read back the same
    band: float = float("nan")  # noise band of accuracy_delta (points); NaN: cannot be judged
    within_noise: bool | None = None  # None: no band, the difference cannot be judged
    error: str | None = None
    unsupported: str | None = None  # why this dstore / format cannot write this cell
    is_input: bool = False  # the user's input as it is (the baseline row)
    seconds: float = float("nan")  # how long measuring this cell took

    @property
    def label(self) -> str:
        if self.is_input:
            return f"input ({self.format})"
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.format}[{opts}]" if opts else self.format

    @property
    def key(self) -> str:
        """What identifies the cell across runs (``--resume``)."""
        opts = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        return f"{self.format}|{opts}|{self.images}|{self.dtype}"

    @property
    def write_options(self) -> dict[str, Any]:
        """Every ``-o`` option of this cell's conversion."""
        return {**self.options, **self.image_options}

    @property
    def measured(self) -> bool:
        return self.error is None and self.unsupported is None and self.bytes > 0

    @property
    def ratio(self) -> float:
        return self.raw_bytes / self.bytes if self.bytes else float("nan")

    @property
    def bytes_per_record(self) -> float:
        return self.bytes / self.records if self.records else float("nan")

    def spread(self, name: str) -> float:
        """Half the 95% interval of figure ``name`` over its value (0 when measured whole)."""
        lo, hi = self.intervals.get(name, (math.nan, math.nan))
        value = float(getattr(self, name))
        if math.isnan(lo) or not value:
            return 0.0
        return (hi - lo) / 2 / abs(value)


@dataclass
class BenchReport:
    source: str
    task: Task | None
    baseline_accuracy: float
    baseline_probe_s: float
    noise_points: float  # twice the baseline's standard error; NaN: unknown
    cells: list[Cell]
    machine: dict[str, Any]
    settings: dict[str, Any]
    recommendation: Cell | None = None
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    input: Cell | None = None  # the user's input as it is
    probe_dtype: str = ""  # the dtype the baseline probe trained on
    chance: float = float("nan")  # the probe's constant guess on the original data
    probe_detail: str = ""  # what the probe learnt from (classes, pixels per tile)
    skipped: list[str] = field(default_factory=list)  # one line per choice not measured
    sample: str = ""  # how the records were sampled ("" when all were measured)
    probe_records: str = ""  # which records the probe trained and tested on
    planned: int = 0  # cells planned (a partial report has fewer)
    keep_input: bool = False  # the recommendation is to keep the input as it is
    fingerprint: dict[str, Any] = field(default_factory=dict)  # the input, for --resume

    @property
    def probe(self) -> str:
        """Which probe ran: ``classification``, ``object detection (classes present)``,
        ``segmentation (pixel accuracy)``; ``evaluate`` for a user's function; "" for none."""
        if self.task is not None:
            return self.task.probe
        return "" if math.isnan(self.baseline_accuracy) else "evaluate"

    @property
    def complete(self) -> bool:
        return len(self.cells) >= self.planned
