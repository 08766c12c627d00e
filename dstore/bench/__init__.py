"""``dstore bench``: size, speed, memory, fidelity and accuracy impact of each format on your data.

Needs the ``bench`` extra (scikit-learn for the probe, matplotlib for plots).
"""

from __future__ import annotations

from .harness import BenchReport, Cell, bench
from .report import save_plot, save_report, to_markdown, to_text

__all__ = ["BenchReport", "Cell", "bench", "save_plot", "save_report", "to_markdown", "to_text"]
