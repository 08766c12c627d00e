"""What ``dstore bench`` measured: one :class:`Cell` per format x image encoding x dtype
policy (x codec setting), and the :class:`BenchReport` holding them.

Plain records, below both the harness that fills them and the report that prints
them, so neither imports the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .accuracy import Task

__all__ = ["BenchReport", "Cell"]


@dataclass
class Cell:
    """One measured configuration."""

    format: str
    dtype: str
    options: dict[str, Any]
    images: str = "png"  # the --images value; its -o options are in image_options
    image_options: dict[str, Any] = field(default_factory=dict)
    bytes: int = 0
    raw_bytes: int = 0
    records: int = 0
    write_s: float = float("nan")
    read_s: float = float("nan")
    peak_write_mb: float = float("nan")  # peak RSS of the process that wrote (MiB)
    loader_rps: float = float("nan")  # --read: the training loader's records/s, warm cache
    loader_mbps: float = float("nan")  # --read: its MB/s of the cell's bytes, warm cache
    loader_cold_rps: float = float("nan")  # --read: records/s after a page-cache drop
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    bit_exact: bool = False
    accuracy: float = float("nan")
    accuracy_delta: float = float("nan")  # points against the original data
    probe_s: float = float("nan")  # the probe's (or evaluate's) training time
    probe_dtype: str = ""  # the dtype the probe trained on
    band: float = float("nan")  # noise band of accuracy_delta (points); NaN: cannot be judged
    within_noise: bool | None = None  # None: no band, the difference cannot be judged
    error: str | None = None
    unsupported: str | None = None  # why this dstore / format cannot write this cell
    is_input: bool = False  # the user's input as it is (the baseline row)

    @property
    def label(self) -> str:
        if self.is_input:
            return f"input ({self.format})"
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.format}[{opts}]" if opts else self.format

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


@dataclass
class BenchReport:
    source: str
    task: Task | None
    baseline_accuracy: float
    baseline_probe_s: float
    noise_points: float  # twice the baseline's binomial standard error; NaN: unknown
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

    @property
    def probe(self) -> str:
        """Which probe ran: ``classification``, ``object detection (classes present)``,
        ``segmentation (pixel accuracy)``; ``evaluate`` for a user's function; "" for none."""
        if self.task is not None:
            return self.task.probe
        return "" if math.isnan(self.baseline_accuracy) else "evaluate"
