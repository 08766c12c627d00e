"""Typed codec options: frozen dataclasses, parsed from ``-o KEY=VALUE`` strings by type.

Each codec declares its options as one frozen dataclass (zarr's codecs are
frozen dataclasses too); adding a key is one line::

    @dataclass(frozen=True)
    class MyOptions:
        quality: int = option(90, "JPEG quality 1..100")
        image_codec: Literal["png", "jpeg"] = option("png", "how raw images are stored")
        images: tuple[str, ...] | None = option(None, "fields stored as images", none="auto")

    def validate(self) -> None:   # optional: checks across keys or ranges
        ...

How a value is read from its text follows the field's type, so no codec
parses a mini-language by hand:

===========================  ==============================================
type                         text
===========================  ==============================================
``bool``                     ``true/false``, ``yes/no``, ``on/off``, ``1/0``
``int``, ``float``, ``str``  as Python reads them
``Literal["a", "b"]``        one of the choices (checked, listed by --help)
``tuple[str, ...]``          comma-separated: ``x,y``; ``none`` or empty: ()
``dict[str, str]``           comma-separated pairs: ``x=image,y=label``
``T | None``                 the word given as ``none=`` (e.g. ``auto``): None
===========================  ==============================================

Every mistake (unknown key, unreadable value, a value ``validate`` refuses) is
an :class:`~dstore.errors.OptionError`: one line, exit status 2 from the CLI.
:func:`option_text` writes a value back as the text that reads as it, which is
what manifests and ``--help`` show (so ``images=auto`` stays ``"auto"``).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin

from .errors import DstoreError, OptionError

__all__ = [
    "option",
    "option_help",
    "option_text",
    "options_json",
    "parse_bool",
    "parse_options",
]

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(value: Any) -> bool:
    """``true/false``, ``yes/no``, ``on/off``, ``1/0`` (any case), or a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def option(default: Any, help: str, *, none: str | None = None) -> Any:
    """A dataclass field with its ``--help`` text; ``none`` is the word that means None."""
    metadata = {"help": help, "none": none}
    if isinstance(default, (dict, list, set)):  # mutable: one copy per instance
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _hints(cls: type) -> dict[str, Any]:
    # the codec modules use ``from __future__ import annotations``: resolve the strings
    return typing.get_type_hints(cls)


def _split_optional(tp: Any) -> tuple[Any, bool]:
    """``T | None`` -> (T, True); anything else -> (tp, False)."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return tp, False


def _parse(tp: Any, value: Any, none_word: str | None) -> Any:
    """``value`` (text from the command line, or a Python value) as type ``tp``."""
    inner, optional = _split_optional(tp)
    if optional and (value is None or (none_word is not None and value == none_word)):
        return None
    tp = inner
    origin = get_origin(tp)
    if tp in _SCALARS:
        return _SCALARS[tp](value)
    if origin is Literal:
        choices = get_args(tp)
        text = value if not isinstance(value, str) else value.strip()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(map(str, choices))}")
        return text
    if origin is tuple:
        if isinstance(value, str):
            text = value.strip()
            if text in ("", "none"):
                return ()
            return tuple(part.strip() for part in text.split(",") if part.strip())
        return tuple(str(v) for v in value)
    if origin in (dict, Mapping):
        return _parse_pairs(value)
    raise TypeError(f"option type {tp!r} is not supported")  # a codec's bug, not the user's


def _parse_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("expected an integer")
    return int(value)


def _parse_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("expected a number")
    number = float(value)
    if not math.isfinite(number):  # NaN passes every 'must be >= 0' a codec checks
        raise ValueError("expected a finite number")
    return number


#: the scalar option types and how each parses
_SCALARS: dict[Any, Callable[[Any], Any]] = {
    bool: parse_bool,
    int: _parse_int,
    float: _parse_float,
    str: str,
}


def _parse_pairs(value: Any) -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` (or a mapping) as a dict of text."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    out = {}
    for part in str(value).split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE pairs separated by commas, got {part!r}")
        out[key.strip()] = val.strip()
    return out


def parse_options(cls: type[T], values: Mapping[str, Any], codec: str) -> T:
    """An instance of the option dataclass ``cls`` from ``values`` (text or typed).

    Raises :class:`~dstore.errors.OptionError` naming the codec, key and value.
    Old names in the class's ``RENAMED`` (``{"image_format": "image_codec"}``) are
    read as their new names, with a ``FutureWarning`` saying so."""
    values = renamed_options(cls, values, codec)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise OptionError(
            f"{codec}: unknown option(s) {', '.join(unknown)}; valid: {', '.join(fields) or 'none'}"
        )
    hints = _hints(cls)
    parsed = {}
    for key, value in values.items():
        try:
            parsed[key] = _parse(hints[key], value, fields[key].metadata.get("none"))
        except ValueError as e:
            raise OptionError(f"{codec}: option {key}={value!r}: {e}") from None
    opts = cls(**parsed)
    validate = getattr(opts, "validate", None)
    if validate is not None:
        try:
            validate()
        except DstoreError:
            raise
        except ValueError as e:  # a codec's validate() written before OptionError
            raise OptionError(str(e)) from None
    return opts


def renamed_options(cls: type, values: Mapping[str, Any], codec: str) -> dict[str, Any]:
    """``values`` with the old option names ``cls.RENAMED`` lists under their new names."""
    out = dict(values)
    for old, new in getattr(cls, "RENAMED", {}).items():
        if old not in out:
            continue
        if new in out:
            raise OptionError(f"{codec}: give {new}= only ({old}= is its old name)")
        warnings.warn(
            f"{codec}: option {old}= is now called {new}= (the old name will go)",
            FutureWarning,
            stacklevel=3,
        )
        out[new] = out.pop(old)
    return out


def option_text(value: Any, none_word: str | None = None) -> Any:
    """A parsed value as the text that parses back to it; numbers and bools stay JSON."""
    if value is None:
        return none_word
    if isinstance(value, tuple):
        return ",".join(value) if value else "none"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return value


def options_json(opts: Any) -> dict[str, Any]:
    """The options as JSON in their text forms (manifests, ``get_config``, journals)."""
    return {
        f.name: option_text(getattr(opts, f.name), f.metadata.get("none"))
        for f in dataclasses.fields(opts)
    }


def option_help(cls: type[DataclassInstance]) -> list[tuple[str, str, str]]:
    """(key, default as text, help) of each option, for ``--help`` and ``dstore formats``."""
    hints = _hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:  # every option has a default: a codec's bug, not the user's
            raise TypeError(f"option {f.name!r} of {cls.__name__} has no default")
        shown = option_text(default, f.metadata.get("none"))
        shown = str(shown).lower() if isinstance(shown, bool) else str(shown)
        text = f.metadata.get("help", "")
        tp, _ = _split_optional(hints[f.name])
        if get_origin(tp) is Literal and "|" not in text:
            text = (
                f"{' | '.join(map(str, get_args(tp)))}: {text}"
                if text
                else " | ".join(get_args(tp))
            )
        out.append((f.name, shown, text))
    return out
