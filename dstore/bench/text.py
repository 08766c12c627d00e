"""Small text helpers of the bench's table: sizes, numbers, fitting a width."""

from __future__ import annotations

import math

__all__ = ["MIN_NOTE", "fit_columns", "fmt_size", "footnoted", "num"]

#: A note narrower than this goes below the table as a numbered footnote.
MIN_NOTE = 16


def fmt_size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def num(v: float, fmt: str) -> str:
    return "-" if math.isnan(v) else format(v, fmt)


def fit_columns(
    rows: list[dict[str, str]], cols: list[tuple[str, str]], width: int, drop: tuple[str, ...]
) -> tuple[list[tuple[str, str]], int]:
    """Drop ``drop``'s columns in turn until the others leave a note of :data:`MIN_NOTE`
    characters within ``width``; the room the note gets."""

    def used(cs: list[tuple[str, str]]) -> int:
        fixed = [max(len(h), *(len(r[k]) for r in rows)) for k, h in cs if k != "note"]
        return sum(fixed) + 2 * len(fixed)

    for key in drop:
        if used(cols) + MIN_NOTE <= width:
            break
        cols = [c for c in cols if c[0] != key]
    return cols, max(width - used(cols), len("note"))


def footnoted(rows: list[dict[str, str]], room: int) -> list[str]:
    """Notes longer than ``room`` become ``[n]`` in the row and a numbered line below
    the table (one per distinct note), so no row is cut and none runs past the width."""
    notes: list[str] = []
    for r in rows:
        if len(r["note"]) > room:
            if r["note"] not in notes:
                notes.append(r["note"])
            r["note"] = f"[{notes.index(r['note']) + 1}]"
    return notes
