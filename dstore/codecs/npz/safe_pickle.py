"""The one place dstore reads pickled data: npz object arrays of plain arrays and strings.

``np.savez(path, y=list_of_arrays)`` is how many users save ragged labels;
numpy stores such a member as a pickled object array. Unpickling runs
whatever callables the data names, so this reader lets the data name only
what rebuilding numeric arrays and dtypes needs -- each through a wrapper
that checks its arguments -- and then checks that what came out is plain
data: numeric arrays, ``str``, ``bytes``, numbers, and lists/tuples of them.

Anything else is refused before it is called, naming the global it asked
for. Python's own docs ("Restricting Globals") describe the mechanism: every
callable a pickle can reach comes through ``Unpickler.find_class``.
"""

from __future__ import annotations

import io
import math
import pickle
import re
import struct
from collections.abc import Callable
from typing import IO, Any, ClassVar

import numpy as np

from ...errors import CodecIOError

__all__ = ["UnsafePickleError", "load_object_array"]

#: Elements in the array ``_reconstruct`` allocates before its state is set
#: (numpy always pickles ``(0,)`` there; real data arrives by BUILD, checked
#: against the bytes actually present).
_MAX_RECONSTRUCT = 1
#: Nesting of lists/tuples accepted inside one record.
_MAX_DEPTH = 32
#: What a pickle may expand to, following every memo reference: this many
#: times its own size, and never less than the floors below.
_EXPANSION = 64
_MIN_ITEMS = 1_000_000
_MIN_BYTES = 256 * 2**20
#: dtypes the data may ask for: bool, ints, floats, complex, object, text
_DTYPE_RE = re.compile(r"^[<>|=]?(b1|[iu][1248]|f[248]|c(8|16)|O[48]?|[US]\d{1,9})$")


class UnsafePickleError(CodecIOError):
    """A pickled npz member asked for something other than plain arrays and strings."""


class _Guarded:
    """Base of everything ``find_class`` hands out. No ``__dict__`` and no slots:
    a pickle's BUILD opcode sets attributes on what it built, and these objects
    are shared by every load, so they must have nothing to set."""

    __slots__ = ()


class _NdarrayToken(_Guarded):
    """Stands in for ``numpy.ndarray`` so the data can pass it to ``_reconstruct``
    without being able to call the class itself (``ndarray(shape)`` allocates)."""

    __slots__ = ()


class _Reconstruct(_Guarded):
    """``numpy.core.multiarray._reconstruct``: an empty array whose state BUILD sets
    (numpy checks that state against the bytes actually in the pickle)."""

    __slots__ = ()

    def __call__(self, subtype: Any, shape: Any, dtype_code: Any) -> np.ndarray:
        if subtype is not _NDARRAY:
            raise pickle.UnpicklingError("_reconstruct of something other than numpy.ndarray")
        if (
            not isinstance(shape, tuple)
            or not all(type(n) is int and n >= 0 for n in shape)
            or math.prod(shape) > _MAX_RECONSTRUCT
        ):
            raise pickle.UnpicklingError(f"_reconstruct with shape {shape!r}")
        if dtype_code not in (b"b", "b"):
            raise pickle.UnpicklingError(f"_reconstruct with type code {dtype_code!r}")
        return np.empty(shape, np.int8)


class _Dtype(_Guarded):
    """``numpy.dtype(spec, align, copy)`` for plain numeric, object and text specs only."""

    __slots__ = ()

    def __call__(self, spec: Any, align: Any = False, copy: Any = False) -> np.dtype:
        if (
            not isinstance(spec, str)
            or not _DTYPE_RE.match(spec)
            or align not in (0, 1)
            or copy not in (0, 1)
        ):
            raise pickle.UnpicklingError(f"numpy.dtype({spec!r})")
        # Always a fresh descriptor: BUILD then sets its byte order, and with
        # copy=False it would set it on numpy's shared builtin dtype instead.
        dtype = np.dtype(spec, align=bool(align), copy=True)
        if dtype.itemsize == 0:
            # numpy never pickles one ('S0' arrays are made 'S1'); zero bytes of
            # data would carry any number of elements: 2**62 empty strings
            raise pickle.UnpicklingError(f"numpy.dtype({spec!r}) of zero bytes")
        return dtype


class _Scalar(_Guarded):
    """``numpy.core.multiarray.scalar(dtype, bytes)``: a numpy number inside an object array."""

    __slots__ = ()

    def __call__(self, dtype: Any, data: Any = None) -> Any:
        if (
            not isinstance(dtype, np.dtype)
            or dtype.kind not in "biufc"
            or not isinstance(data, bytes)
        ):
            raise pickle.UnpicklingError("numpy scalar of a non-numeric dtype")
        if len(data) != dtype.itemsize:
            raise pickle.UnpicklingError("numpy scalar of the wrong size")
        return np.frombuffer(data, dtype)[0]


class _Latin1Encode(_Guarded):
    """``_codecs.encode(text, "latin1")``: how pickle protocol 2 writes ``bytes``."""

    __slots__ = ()

    def __call__(self, text: Any, encoding: Any = "utf-8") -> bytes:
        if type(text) is not str or encoding not in ("latin1", "latin-1"):
            raise pickle.UnpicklingError("_codecs.encode other than text to latin1")
        return text.encode("latin1")


class _EmptyBytes(_Guarded):
    """``bytes()``: how pickle protocol 2 writes ``b""`` (``bytes(n)`` would allocate n)."""

    __slots__ = ()

    def __call__(self, *args: Any) -> bytes:
        if args:
            raise pickle.UnpicklingError("bytes() with arguments")
        return b""


class _FromBuffer(_Guarded):
    """``numpy.core.numeric._frombuffer``: how pickle protocol 5 writes an array's bytes."""

    __slots__ = ()

    def __call__(self, buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
        if not isinstance(buf, (bytes, bytearray)) or not isinstance(dtype, np.dtype):
            raise pickle.UnpicklingError("_frombuffer of something other than bytes")
        if dtype.kind not in "biufcUS" or dtype.fields is not None or order not in ("C", "F"):
            raise pickle.UnpicklingError(f"_frombuffer of dtype {dtype}")
        if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
            raise pickle.UnpicklingError(f"_frombuffer with shape {shape!r}")
        if math.prod(shape) * dtype.itemsize != len(buf):
            raise pickle.UnpicklingError("_frombuffer: shape and bytes disagree")
        return np.frombuffer(bytes(buf), dtype).reshape(shape, order=order)


_NDARRAY = _NdarrayToken()
_ALLOWED: dict[tuple[str, str], _Guarded] = {
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Dtype(),
}
_ALLOWED[("_codecs", "encode")] = _Latin1Encode()
_ALLOWED[("__builtin__", "bytes")] = _ALLOWED[("builtins", "bytes")] = _EmptyBytes()
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):  # numpy 1.x and 2.x names
    _ALLOWED[(_mod, "_reconstruct")] = _Reconstruct()
    _ALLOWED[(_mod, "scalar")] = _Scalar()
for _mod in ("numpy.core.numeric", "numpy._core.numeric"):
    _ALLOWED[(_mod, "_frombuffer")] = _FromBuffer()


def _check_dtype_state(dtype: np.dtype, state: Any) -> None:
    """A dtype's BUILD may set the byte order of a multi-byte number or text, and
    nothing else.

    numpy's ``dtype.__setstate__`` trusts what it is given: a pickle that sets
    the "holds object references" flags on a bool or int dtype makes numpy
    treat the array's bytes as object pointers (found by the mutation fuzz
    test: numpy's internal errors), and a big-endian *object* dtype (``'>O'``,
    which ``numpy.dtype()`` itself never makes) makes numpy byte-swap the
    pointers: the process dies with SIGSEGV on the next comparison, copy or
    free of the array (found by a loaded run of the whole suite that crashed).
    So the state must be the fresh descriptor's own; only a descriptor that
    has a byte order (``'<'``/``'>'``, not ``'|'``) may change it."""
    fresh = dtype.__reduce__()[2]
    orders = ("<", ">", "=") if fresh[1] in ("<", ">", "=") else (fresh[1],)
    if (
        not isinstance(state, tuple)
        or len(state) != len(fresh)
        or state[1] not in orders
        or state[:1] + state[2:] != fresh[:1] + fresh[2:]
    ):
        raise pickle.UnpicklingError(f"dtype {dtype} with a state of its own: {state!r:.80}")


def _check_array_state(state: Any) -> None:
    """An array's BUILD state must describe exactly the data it carries.

    numpy's ``ndarray.__setstate__`` fills an object array from the state's
    list without checking its length against the shape: ``(60,)`` with a
    three-item list reads past the list and the process dies with SIGSEGV
    (found by the byte-sweep test). So the element count is checked here,
    before numpy sees it: an object array needs a list of exactly that many
    items, any other array exactly that many bytes."""
    if not isinstance(state, tuple) or len(state) not in (4, 5):
        raise pickle.UnpicklingError("an array state that is not numpy's")
    shape, dtype, fortran, raw = state[-4:]
    if (
        not isinstance(shape, tuple)
        or not all(type(n) is int and n >= 0 for n in shape)
        or not isinstance(dtype, np.dtype)
        or fortran not in (0, 1)
    ):
        raise pickle.UnpicklingError(f"an array state with shape {shape!r}, dtype {dtype!r}")
    count = math.prod(shape)
    if dtype.hasobject:
        if type(raw) is not list or len(raw) != count:
            raise pickle.UnpicklingError(f"an object array of shape {shape} without its items")
    elif not isinstance(raw, (bytes, bytearray)) or len(raw) != count * dtype.itemsize:
        raise pickle.UnpicklingError(f"an array of shape {shape} without its bytes")


class _RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler: its opcode table can be extended, here to check
    what BUILD hands a dtype or an array before numpy sees it (the C one cannot be)."""

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)

    def _load_build(self) -> None:
        stack: list[Any] = self.stack  # type: ignore[attr-defined]  # made by load()
        state, inst = stack[-1], stack[-2]
        if isinstance(inst, np.dtype):
            _check_dtype_state(inst, state)
        elif isinstance(inst, np.ndarray):
            _check_array_state(state)
        pickle._Unpickler.load_build(self)  # type: ignore[attr-defined]  # not in the stubs

    dispatch[pickle.BUILD[0]] = _load_build

    def _load_bytearray8(self) -> None:
        # Python's own handler allocates (and zeroes) the length the data claims
        # before reading it: eight hostile bytes would make a few-hundred-byte
        # member ask for gigabytes. Read what is there, then check the claim.
        (size,) = struct.unpack("<Q", self.read(8))  # type: ignore[attr-defined]
        data = self.read(min(size, self._size))  # type: ignore[attr-defined]
        if len(data) != size:
            raise pickle.UnpicklingError(f"BYTEARRAY8 of {size} bytes, {len(data)} present")
        self.append(bytearray(data))  # type: ignore[attr-defined]

    dispatch[pickle.BYTEARRAY8[0]] = _load_bytearray8

    def __init__(self, stream: IO[bytes], size: int) -> None:
        super().__init__(stream)
        self._size = size  # the payload's length: no object in it can be longer

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(f"{module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not allowed")


class _Budget:
    """How far a pickle may expand once every reference is followed.

    A memo reference (BINGET, two bytes) stands for an object already built,
    as often as the data likes: ten lists of ten references to the list before,
    twenty deep, is 10**20 leaves in 400 bytes, and 200,000 references to one
    1 MB string are 200 GB once a caller makes a column of them (both found by
    a hostile-input pass). Real object arrays repeat little (a label string
    shared by many records), so what the data expands to is bounded by a
    multiple of its own size."""

    def __init__(self, size: int) -> None:
        self.items = max(_MIN_ITEMS, _EXPANSION * size)
        self.bytes = max(_MIN_BYTES, _EXPANSION * size)

    def spend(self, items: int, nbytes: int) -> None:
        self.items -= items
        self.bytes -= nbytes
        if self.items < 0 or self.bytes < 0:
            raise pickle.UnpicklingError(
                "it expands to far more than its own size (references to the same "
                "objects, repeated)"
            )


def _check_plain(value: Any, budget: _Budget, depth: int = 0) -> None:
    """Plain data only: numeric arrays, str, bytes, numbers, lists/tuples of them."""
    if depth > _MAX_DEPTH:
        raise pickle.UnpicklingError("nested too deeply")
    if isinstance(value, (str, bytes)):
        budget.spend(1, len(value))
        return
    if isinstance(value, (bool, int, float, complex, np.number, np.bool_)):
        budget.spend(1, 8)
        return
    if isinstance(value, np.ndarray) and type(value) is np.ndarray:
        budget.spend(1, value.nbytes)
        if value.dtype.kind in "biufc" and value.dtype.fields is None:
            return
        if value.dtype.kind in "US":
            return
        if value.dtype.kind == "O":
            budget.spend(value.size, 0)
            for item in value.reshape(-1).tolist():
                _check_plain(item, budget, depth + 1)
            return
        raise pickle.UnpicklingError(f"an array of dtype {value.dtype}")
    if type(value) in (list, tuple):
        budget.spend(1 + len(value), 0)
        for item in value:
            _check_plain(item, budget, depth + 1)
        return
    raise pickle.UnpicklingError(f"a {type(value).__name__}")


def load_object_array(data: bytes | IO[bytes], where: str, size: int | None = None) -> np.ndarray:
    """Unpickle an npz object member's payload (what follows its ``.npy`` header).

    ``data`` is the payload, or a stream positioned at it holding ``size``
    bytes (read as the unpickler goes, so the payload is never in memory
    whole beside what it builds). Returns an object ndarray whose elements
    are plain data; raises :class:`UnsafePickleError` naming the global a
    hostile pickle asked for, or :class:`CodecIOError` for anything else
    that is not plain data."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        stream: IO[bytes] = io.BytesIO(data)
        size = len(data)
    else:
        if size is None:
            raise TypeError("load_object_array: a stream needs its size")
        stream = data
    try:
        value = _RestrictedUnpickler(stream, size).load()
        if not (
            isinstance(value, np.ndarray) and type(value) is np.ndarray and value.dtype.kind == "O"
        ):
            raise pickle.UnpicklingError(
                f"the payload is a {type(value).__name__}, not an object array"
            )
        _check_plain(value, _Budget(size))
    except UnsafePickleError as e:
        raise UnsafePickleError(
            f"{where}: refused to unpickle: the data asks for {e} "
            "(only numpy arrays, dtypes, str and bytes may be rebuilt)"
        ) from None
    except RecursionError:
        raise CodecIOError(f"{where}: pickled object array nested too deeply") from None
    except MemoryError:
        raise CodecIOError(f"{where}: pickled object array too large to rebuild") from None
    except Exception as e:  # noqa: BLE001 - a malformed pickle raises any type; none is trusted
        raise CodecIOError(
            f"{where}: not a plain pickled object array: {type(e).__name__}: {e}"
        ) from None
    return value
