"""Text shared by the reports (convert summaries, info listings, verify results):
numbers, and names from data shown so that they cannot forge the text around them."""

from __future__ import annotations

from ..model.names import printable, shown
from ..output import fmt_bytes

__all__ = ["fmt_bytes", "printable", "shown"]
