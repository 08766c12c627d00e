"""Records as PyTorch sees them: columns to tensors (zero-copy where the batch owns its
memory), one dict per record, and ``collate``, which pads varying-size records on
request."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.utils.data as tud

from ..errors import SchemaError
from ..model import Bytes, Image, Kind, String, StringList, VarColumn

if TYPE_CHECKING:
    from .split import SplitSource

__all__ = ["Record", "collate", "pad_collate", "records_at"]

#: one record as a training loop sees it: field name -> tensor, or a list for text
Record = dict[str, Any]


def _column(values: Any, kind: Kind, copy: bool) -> Sequence[Any] | torch.Tensor:
    """One field of a batch as something indexable per record.

    A fixed-shape field (an ndarray column) becomes one tensor whose rows are
    the records. A column of values + row offsets (:class:`~dstore.model.VarColumn`)
    becomes a ``list[str]`` (String), ``list[bytes]`` (Bytes, encoded images),
    or a list of tensors whose first axis varies (Ragged, raw images of
    varying size), which :func:`collate` keeps as a list or pads with a mask.
    """
    if isinstance(values, VarColumn):
        if isinstance(kind, StringList):  # list[list[str]] (or of bytes)
            return values.to_lists(kind.text)
        if isinstance(kind, String):
            return values.to_str_list()
        if isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw"):
            return values.to_bytes_list()
        return [_tensor(values.row(i), True) for i in range(len(values))]
    return _tensor(values, copy)


def _tensor(values: np.ndarray, copy: bool) -> torch.Tensor:
    arr = values.astype(values.dtype.newbyteorder("="), copy=False)
    if copy or not arr.flags.writeable or not arr.flags.c_contiguous:
        # torch shares memory with the array: it must be ours and writeable
        arr = np.array(arr, order="C")
    return torch.from_numpy(arr)


def _records(
    batches: Iterator[dict[str, Any]],
    kinds: dict[str, Kind],
    copy: bool,
    order: np.ndarray | None = None,
) -> Iterator[Record]:
    """The records of ``batches``, each batch's in storage order or, with ``order``
    (one batch), its rows in that order."""
    for batch in batches:
        cols = {n: _column(batch[n], kind, copy) for n, kind in kinds.items()}
        rows = len(next(iter(cols.values()))) if cols else 0
        for i in range(rows) if order is None else order.tolist():
            # clone: a shuffle buffer must not keep whole batches alive through views
            yield {
                n: (c[i].clone() if copy and isinstance(c, torch.Tensor) else c[i])
                for n, c in cols.items()
            }


def records_at(source: SplitSource, indexes: np.ndarray) -> Iterator[Record]:
    """The records at distinct positions ``indexes``, in that order (those that read,
    with ``on_error="skip"``): read in storage order and handed out as views in the
    order asked, never copied into it first (a window of 64 photo tiles is 12 MB)."""
    kinds = source.kinds()
    wanted = np.unique(indexes)
    if len(wanted) != len(indexes):  # a position twice: each record its own memory
        batch, _ = source.read_records(indexes)
        yield from _records(iter([batch]), kinds, copy=False)
        return
    batch, got = source.read_records(wanted)
    rows = np.searchsorted(got, indexes)
    read = rows < len(got)
    read[read] = got[rows[read]] == indexes[read]
    yield from _records(iter([batch]), kinds, copy=False, order=rows[read])


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent ranges joined (a streaming consumer reads its block in one pass)."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def collate(
    records: Sequence[Record], *, pad: bool = False, ragged: Sequence[str] = ()
) -> dict[str, Any]:
    """A batch from records, for ``DataLoader(collate_fn=...)``.

    Tensors of one shape are stacked (in shared memory, as torch's default
    collate does in a worker); tensors whose first axis varies (ragged fields)
    stay a list, or with ``pad=True`` become one zero-padded tensor plus
    ``<field>_mask`` (True where a value is real); strings, bytes and lists of
    strings stay lists.
    Fields named in ``ragged`` are treated so even when a batch's records
    happen to share a length (``dataset.collate_fn()`` names them from the schema).
    """
    if not records:
        return {}
    out: dict[str, Any] = {}
    for name in records[0]:
        values = [r[name] for r in records]
        first = values[0]
        if isinstance(first, torch.Tensor):
            if name not in ragged and all(v.shape == first.shape for v in values):
                out[name] = tud.default_collate(values)
            elif pad:
                if f"{name}_mask" in records[0]:
                    raise SchemaError(
                        f"pad_collate: field {name!r} and a field {name}_mask both exist"
                    )
                out[name], out[f"{name}_mask"] = _pad(values)
            else:
                out[name] = values
        elif isinstance(first, (str, bytes, list)):  # strings, bytes, lists of strings
            out[name] = values
        else:
            out[name] = tud.default_collate(values)
    return out


#: :func:`collate` padding ragged fields and adding ``<field>_mask``.
pad_collate = functools.partial(collate, pad=True)


def _pad(values: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    inner = {tuple(v.shape[1:]) for v in values}
    if len(inner) != 1 or any(v.ndim == 0 for v in values):
        raise SchemaError(f"pad_collate: records differ beyond their first axis: {sorted(inner)}")
    longest = max(len(v) for v in values)
    padded = values[0].new_zeros((len(values), longest, *values[0].shape[1:]))
    mask = torch.zeros((len(values), longest), dtype=torch.bool)
    for i, v in enumerate(values):
        padded[i, : len(v)] = v
        mask[i, : len(v)] = True
    return padded, mask
