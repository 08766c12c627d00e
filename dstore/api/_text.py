"""Text shared by the reports (convert summaries, info listings, verify results):
numbers, and names from data shown so that they cannot forge the text around them."""

from __future__ import annotations

from ..model.names import printable, shown

__all__ = ["fmt_bytes", "printable", "shown"]


def fmt_bytes(n: float) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as file managers show sizes)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)
