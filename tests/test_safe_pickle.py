"""The restricted unpickler for npz object arrays: plain arrays and strings, nothing else, ever."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dstore.codecs.npz.safe_pickle import UnsafePickleError, load_object_array
from dstore.errors import CodecIOError


def _payload(arr: np.ndarray) -> bytes:
    """What np.save writes after the .npy header for an object array."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    raw = buf.getvalue()
    header_len = int.from_bytes(raw[8:10], "little")
    return raw[10 + header_len :]


def _object_array(items: list[Any]) -> np.ndarray:
    arr = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        arr[i] = item
    return arr


PLAIN = [
    [np.arange(3), np.zeros((2, 4), np.float32), np.arange(0)],  # ragged labels, as users save them
    [np.array([[1, 2, 3, 4]], ">i4"), np.ones((0, 4), np.float64), np.array([True, False])],
    ["a", "bé", "", "日本"],
    [b"\x00\xff", b"", "mixed"],
    [[1, 2, 3], [4], []],
    [np.float64(1.5), np.int16(-3), 7, 2.5, True],
    [np.array(["x", "yz"]), np.array([b"q"])],
    [np.complex64(1 + 2j), np.arange(6, dtype=np.uint64).reshape(2, 3)],
]


@pytest.mark.parametrize("items", PLAIN)
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_plain_object_arrays_load_like_numpy(items: list[Any], protocol: int) -> None:
    arr = _object_array(items)
    buf = io.BytesIO()
    pickle.dump(arr, buf, protocol=protocol)
    got = load_object_array(buf.getvalue(), "data.npz: key 'y_train'")
    assert got.dtype == object and got.shape == arr.shape
    # the reference is what numpy's own unpickling gives (protocol 2 makes arrays
    # native-endian); this test made the data itself, so loading it is safe here
    reference = pickle.loads(buf.getvalue())  # noqa: S301 - bytes this test pickled itself
    for a, b in zip(reference, got, strict=True):
        if isinstance(a, np.ndarray):
            assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes()
        else:
            assert type(a) is type(b) and a == b


def test_np_save_payload_loads() -> None:
    arr = _object_array(PLAIN[0])
    got = load_object_array(_payload(arr), "k")
    assert [g.tolist() for g in got] == [a.tolist() for a in arr]


class _Evil:
    def __init__(self, fn: Any, args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.fn, self.args


def _hostile(canary: str) -> list[tuple[str, bytes]]:
    import builtins
    import functools
    import subprocess

    cmd = f"touch {canary}"
    cases: list[tuple[str, bytes]] = []
    for name, obj in [
        ("os.system", _Evil(os.system, (cmd,))),
        ("eval", _Evil(builtins.eval, (f"open({canary!r}, 'w')",))),
        ("exec", _Evil(builtins.exec, (f"open({canary!r}, 'w')",))),
        ("getattr", _Evil(builtins.getattr, ("text", "upper"))),
        ("subprocess", _Evil(subprocess.call, (["touch", canary],))),
        ("partial", functools.partial(os.system, cmd)),
        ("open", _Evil(builtins.open, (canary, "w"))),
    ]:
        cases.append((name, pickle.dumps(_object_array([np.arange(2), obj]), protocol=4)))
        cases.append((name + " alone", pickle.dumps(obj, protocol=2)))
    # ndarray subclasses and other numpy objects that are not plain arrays
    cases.append(("ndarray subclass", pickle.dumps(_object_array([np.arange(3).view(np.memmap)]))))
    cases.append(("masked", pickle.dumps(_object_array([np.ma.masked_array([1, 2], [0, 1])]))))
    cases.append(
        (
            "recarray",
            pickle.dumps(
                _object_array([np.rec.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])])
            ),
        )
    )
    cases.append(("structured", pickle.dumps(_object_array([np.zeros(2, dtype=[("a", "i4")])]))))
    cases.append(("dict", pickle.dumps(_object_array([{"a": 1}]))))
    cases.append(("set", pickle.dumps(_object_array([{1, 2}]))))
    cases.append(("not an array", pickle.dumps([np.arange(3)])))
    cases.append(("datetime", pickle.dumps(_object_array([np.array(["2020-01-01"], "M8[D]")]))))
    # the allowed globals, misused (protocol 0 text opcodes)
    cases.append(
        (
            "huge reconstruct",
            b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(I1000000000000\ntS'b'\ntR.",
        )
    )
    cases.append(("ndarray called", b"cnumpy\nndarray\n(I1000000000\ntR."))
    cases.append(("void dtype", b"cnumpy\ndtype\n(S'V8'\nI0\nI1\ntR."))
    cases.append(("build on token", b"cnumpy\nndarray\n(dS'x'\nI1\nsb."))
    cases.append(("slotstate on dtype wrapper", b"cnumpy\ndtype\n(N(dS'__call__'\nI1\nstb."))
    cases.append(
        (
            "reconstruct of dtype",
            b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\ndtype\n(I0\ntS'b'\ntR.",
        )
    )
    cases.append(("persistent id", b"P1\n."))
    cases.append(("global from builtins", b"cbuiltins\nprint\n(S'x'\ntR."))
    cases.append(("ext registry", b"\x80\x02\x82\x01."))
    return cases


def test_hostile_pickles_are_refused_and_never_run(tmp_path: Any) -> None:
    canary = os.path.join(str(tmp_path), "canary")
    for name, data in _hostile(canary):
        with pytest.raises(CodecIOError) as err:
            load_object_array(data, "evil.npz: key 'y'")
        assert "evil.npz: key 'y'" in str(err.value), name
        assert not os.path.exists(canary), f"{name} ran code"


def test_refusal_names_the_global() -> None:
    data = pickle.dumps(_object_array([_Evil(os.system, ("true",))]))
    with pytest.raises(UnsafePickleError, match=r"asks for (posix|os|nt)\.system"):
        load_object_array(data, "k")


def test_guarded_objects_are_not_changed_by_a_load() -> None:
    """BUILD on the shared wrappers must fail, so one file cannot change how the next is read."""
    from dstore.codecs.npz import safe_pickle as _safe_pickle

    before = {k: (type(v), getattr(v, "__dict__", None)) for k, v in _safe_pickle._ALLOWED.items()}
    for data in (b"cnumpy\nndarray\n(dS'x'\nI1\nsb.", b"cnumpy\ndtype\n(N(dS'spec'\nI1\nstb."):
        with pytest.raises(CodecIOError):
            load_object_array(data, "k")
    assert before == {
        k: (type(v), getattr(v, "__dict__", None)) for k, v in _safe_pickle._ALLOWED.items()
    }


@given(st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_pickles_give_plain_data_or_a_clean_error(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([pickle.dumps(_object_array(p), protocol=4) for p in PLAIN]))
    buf = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "set", "truncate", "insert"]))
        pos = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if action == "flip" and buf:
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "set" and buf:
            buf[pos] = data.draw(st.integers(0, 255))
        elif action == "truncate":
            del buf[pos:]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        got = load_object_array(bytes(buf), "k")
    except CodecIOError:
        return
    assert isinstance(got, np.ndarray) and got.dtype == object
    # use it as a caller would: a descriptor numpy should not have accepted
    # fails here (as SIGSEGV: the byte-order sweep below runs such cases in a child)
    assert got.copy().shape == got.shape
    assert len(np.concatenate([got.reshape(-1), got.reshape(-1)])) == 2 * got.size


class _FlagsDtype:
    """numpy.dtype('b1') whose BUILD state claims object references (flags 63)."""

    def __reduce__(self) -> Any:
        return (np.dtype, ("b1", False, True), (3, "|", None, None, None, -1, -1, 63))


class _ArrayOf:
    def __init__(self, dtype: Any, raw: Any, n: int) -> None:
        self.dtype, self.raw, self.n = dtype, raw, n

    def __reduce__(self) -> Any:
        from numpy._core.multiarray import _reconstruct

        return (_reconstruct, (np.ndarray, (0,), b"b"), (1, (self.n,), self.dtype, False, self.raw))


@pytest.mark.parametrize("flags", [1, 8, 63])
def test_a_dtype_state_claiming_object_references_is_refused(flags: int) -> None:
    """Found by the mutation test: numpy trusts a dtype's pickled flags, so a bool
    dtype 'holding references' made numpy treat bytes as object pointers ("get_clear_loop
    not set for the DType 'bool'", SystemError). BUILD on a dtype may set its byte
    order only."""

    class Flags(_FlagsDtype):
        def __reduce__(self) -> Any:
            fn, args, state = super().__reduce__()
            return (fn, args, (*state[:7], flags))

    inner = _ArrayOf(Flags(), b"\x01" * 8, 8)
    outer = _ArrayOf(np.dtype("O"), [inner], 1)
    with pytest.raises(CodecIOError, match="dtype bool with a state of its own"):
        load_object_array(pickle.dumps(outer, protocol=2), "x.npz")
    # a byte order is all BUILD may change: big-endian numbers still load
    ok = _ArrayOf(np.dtype("O"), [np.arange(3, dtype=">i4")], 1)
    (value,) = load_object_array(pickle.dumps(ok, protocol=2), "x.npz")
    np.testing.assert_array_equal(value, [0, 1, 2])


# Run in a child process: a dtype numpy should never have been given shows up as
# SIGSEGV, which in this process would take the whole test run down with it.
_EXERCISE_LOADS = r"""
import pickle
import sys

import numpy as np

from dstore.codecs.npz.safe_pickle import load_object_array
from dstore.errors import CodecIOError


def exercise(value):
    # what any caller does with a loaded array: compare, copy, join, free
    for array in [value, *[v for v in value.reshape(-1).tolist() if isinstance(v, np.ndarray)]]:
        try:
            array == array
            array.copy()
            np.concatenate([array.reshape(-1), array.reshape(-1)])
        except Exception:
            pass


loaded = refused = 0
for data in pickle.load(sys.stdin.buffer):  # a list of bytes written by the test
    try:
        value = load_object_array(data, "k")
    except CodecIOError:
        refused += 1
        continue
    exercise(value)
    del value
    loaded += 1
print(loaded, refused)
"""


def _run_child(code: str, stdin: bytes) -> str:
    """What a child Python running ``code`` prints; it must exit 0 (a SIGSEGV is -11)."""
    done = subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, check=False, timeout=600
    )
    assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])
    return done.stdout.decode()


def _run_loads(payloads: list[bytes]) -> tuple[int, int]:
    loaded, refused = map(int, _run_child(_EXERCISE_LOADS, pickle.dumps(payloads)).split())
    return loaded, refused


class _OrderedDtype:
    """numpy.dtype(spec) whose BUILD state carries the byte order ``order``."""

    def __init__(self, spec: str, order: str) -> None:
        self.spec, self.order = spec, order

    def __reduce__(self) -> Any:
        fn, args, state = np.dtype(self.spec).__reduce__()
        return (fn, args, (state[0], self.order, *state[2:]))


_SPECS = ["b1", "i1", "u1", "i2", "u4", "i8", "f2", "f4", "f8", "c8", "c16", "S3", "U2"]


def test_a_byte_order_set_on_any_dtype_is_refused_or_harmless() -> None:
    """Found by a loaded run of the whole suite that died with SIGSEGV: the mutation
    test had turned an object dtype's '|' into '>', and numpy then byte-swapped
    the array's object pointers on the next comparison or free. Every byte order
    on every dtype the reader rebuilds: an object dtype keeps '|' (refused
    otherwise); numbers and text with a byte order load, and survive use."""
    items = {"b1": [True, False], "S3": [b"ab", b""], "U2": ["x", "yz"]}
    payloads, expect_loaded = [], 0
    for order in "<>|=":
        payloads.append(pickle.dumps(_ArrayOf(_OrderedDtype("O", order), ["a", b"b"], 2)))
        for spec in _SPECS:
            raw = np.array(items.get(spec, [1, 2]), np.dtype(spec)).tobytes()
            inner = _ArrayOf(_OrderedDtype(spec, order), raw, 2)
            payloads.append(pickle.dumps(_ArrayOf(np.dtype("O"), [inner], 1), protocol=2))
            has_order = np.dtype(spec).byteorder != "|"
            expect_loaded += order in "<>=" if has_order else order == "|"
        expect_loaded += order == "|"  # the object dtype
    loaded, refused = _run_loads(payloads)
    assert (loaded, refused) == (expect_loaded, len(payloads) - expect_loaded)
    # in this process: the refusals name the dtype, and a big-endian float reads right
    with pytest.raises(CodecIOError, match="dtype object with a state of its own"):
        load_object_array(payloads[len(_SPECS) + 1], "x.npz")
    big_one = _ArrayOf(_OrderedDtype("f8", ">"), b"?\xf0" + b"\0" * 6, 1)
    (value,) = load_object_array(pickle.dumps(_ArrayOf(np.dtype("O"), [big_one], 1)), "x.npz")
    np.testing.assert_array_equal(value, [1.0])


def test_every_byte_set_to_a_byte_order_mark_is_refused_or_harmless() -> None:
    """The mutation test's SIGSEGV case as a sweep, not a 1-in-10,000 draw: each byte
    of each plain pickle set to each byte-order mark, loaded and used in a child."""
    payloads = []
    for items in PLAIN:
        for protocol in (2, 4):
            base = pickle.dumps(_object_array(items), protocol=protocol)
            for pos in range(len(base)):
                for mark in b"<>|=":
                    if base[pos] != mark:
                        payloads.append(base[:pos] + bytes([mark]) + base[pos + 1 :])
    loaded, refused = _run_loads(payloads)
    assert loaded + refused == len(payloads) and refused > 0


def _with_bytearray8_claim(claim: int) -> bytes:
    """A real protocol-5 pickle of one float array whose BYTEARRAY8 length says ``claim``."""
    data = pickle.dumps(_object_array([np.arange(3, dtype=np.float64)]), protocol=5)
    at = data.index(pickle.BYTEARRAY8 + (24).to_bytes(8, "little"))
    return data[: at + 1] + claim.to_bytes(8, "little") + data[at + 9 :]


_LOAD_UNDER_A_MEMORY_LIMIT = r"""
import os
import resource
import sys

from dstore.codecs.npz.safe_pickle import load_object_array
from dstore.errors import CodecIOError

# the address space this process has now, plus 1 GiB
in_use = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
resource.setrlimit(resource.RLIMIT_AS, (in_use + 2**30, resource.RLIM_INFINITY))
try:
    load_object_array(sys.stdin.buffer.read(), "x.npz: key 'y'")
except CodecIOError as e:
    print(e)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("claim", [25, 2**33, 2**40, 2**63 - 1])
def test_a_byte_length_longer_than_the_pickle_is_refused_before_allocating(claim: int) -> None:
    """Python's unpickler allocates (and zeroes) the length a BYTEARRAY8 claims
    before reading it: a 300-byte member claiming 8 GiB made a reader allocate 8
    GiB (found by the byte sweep as loads that took seconds). Run under a 1 GiB
    memory limit, a claim larger than the pickle is refused as malformed, not as
    "too large" (which is what running out of the limit would say)."""
    assert load_object_array(_with_bytearray8_claim(24), "k")[0].tolist() == [0.0, 1.0, 2.0]
    message = _run_child(_LOAD_UNDER_A_MEMORY_LIMIT, _with_bytearray8_claim(claim))
    assert message.startswith("x.npz: key 'y': not a plain pickled object array"), message
    assert "too large" not in message


@pytest.mark.parametrize("spec", ["S0", "U0", "<U0"])
def test_a_zero_byte_dtype_is_refused(spec: str) -> None:
    """Zero bytes of data would carry any number of zero-size elements (2**62 empty
    strings loaded from a 200-byte pickle); numpy never pickles such a dtype."""
    inner = _ArrayOf(_OrderedDtype(spec, "|" if spec == "S0" else "<"), b"", 2**62)
    with pytest.raises(CodecIOError, match="of zero bytes"):
        load_object_array(pickle.dumps(_ArrayOf(np.dtype("O"), [inner], 1), protocol=2), "k")


def test_references_to_the_same_objects_cannot_expand_without_bound() -> None:
    """A pickle's memo references stand for an already-built object as often as the
    data likes (found by a hostile-input pass): lists of ten references to the list
    before, twenty deep, are 10**20 leaves in a few hundred bytes (the plain-data
    check walked them for ever); 200,000 references to one 1 MB string are 200 GB
    once a caller makes a column of them. Both are refused; a label shared by a
    million records is not."""
    laughs: list[Any] = ["a"]
    for _ in range(20):
        laughs = [laughs] * 10
    for items in ([laughs], ["x" * 2**20] * 200_000):
        data = pickle.dumps(_object_array(items), protocol=4)
        assert len(data) < 2**21
        with pytest.raises(CodecIOError, match="expands to far more than its own size"):
            load_object_array(data, "k")
    shared = load_object_array(pickle.dumps(_object_array(["cat"] * 10**6), protocol=4), "k")
    assert shared.shape == (10**6,) and shared[-1] == "cat"
