"""Training layouts: registry by name, like the codecs' (``dstore.registry``).

Built-in layouts are dotted paths imported on first use, so ``import dstore``
stays light. Third-party layouts register with :func:`register_layout` or
through the entry-point group ``dstore.layouts``
(``name = "package.module:LayoutClass"``), loaded only when looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..options import renamed_options

if TYPE_CHECKING:
    from ..abc import Reader
    from .base import Layout

__all__ = [
    "ENTRY_POINT_GROUP",
    "apply_layout",
    "get_layout_class",
    "layout_names",
    "register_layout",
    "split_layout_options",
]

ENTRY_POINT_GROUP = "dstore.layouts"

_BUILTIN: dict[str, str] = {
    "tf-object-detection": "dstore.layouts.label_maker:ObjectDetection",
    "tf-segmentation": "dstore.layouts.label_maker:Segmentation",
    "tf-classification": "dstore.layouts.label_maker:Classification",
}
_targets: dict[str, str] = dict(_BUILTIN)
_classes: dict[str, type[Layout]] = {}
_entry_points_loaded = False


def _load_entry_points() -> None:
    global _entry_points_loaded  # noqa: PLW0603 - a module flag, as registry.py's
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _targets.setdefault(ep.name, ep.value)  # built-ins win unless replaced explicitly


def register_layout(cls: type[Layout], *, name: str | None = None, clobber: bool = False) -> None:
    """Register a layout class under ``name`` (default ``cls.name``)."""
    _load_entry_points()
    key = name or cls.name
    if not clobber and key in _targets:
        raise ValueError(f"a layout named {key!r} is already registered (pass clobber=True)")
    _targets[key] = f"{cls.__module__}:{cls.__qualname__}"
    _classes[key] = cls


def layout_names() -> list[str]:
    _load_entry_points()
    return list(_targets)


def get_layout_class(name: str) -> type[Layout]:
    """Import (once) and return the layout registered as ``name``."""
    _load_entry_points()
    if name in _classes:
        return _classes[name]
    target = _targets.get(name)
    if target is None:
        raise UsageError(f"unknown layout {name!r}; available: {', '.join(_targets)}")
    module, _, attr = target.partition(":")
    cls: type[Layout] = getattr(importlib.import_module(module), attr)
    _classes[name] = cls
    return cls


def split_layout_options(
    name: str, options: Mapping[str, Any] | None
) -> tuple[Layout, dict[str, Any]]:
    """The layout ``name`` built from its own ``-o`` options, and the options left for the
    destination codec (the layout's shared keys, such as ``image_codec``, stay in both)."""
    cls = get_layout_class(name)
    mine = set(cls.option_names())
    # an old option name the layout shares with the codec: both must read it as the new one
    options = renamed_options(cls.Options, options or {}, f"layout {name}")
    layout = cls(**{k: v for k, v in options.items() if k in mine})
    rest = {k: v for k, v in options.items() if k not in mine or k in cls.shared_options}
    return layout, rest


def apply_layout(reader: Reader, layout: Layout) -> Reader:
    """``reader``'s dataset through ``layout``: mapped to it, or back when it already holds it."""
    from .base import LayoutReader

    return LayoutReader(reader, layout)
