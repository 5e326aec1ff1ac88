"""What a first try gets wrong gets a message that says what to do instead."""

from __future__ import annotations

import array
import ast
import re
from pathlib import Path

import pytest

import clearpages as cp


@pytest.mark.parametrize("buf", [bytearray(b"\x01" * 10), memoryview(bytearray(b"\x01" * 4)),
                                 array.array("B", [1, 2])])
def test_clear_many_of_one_buffer_says_clear_is_for_one(buf):
    with pytest.raises(TypeError, match=r"clear_many takes an iterable of buffers, and item 0 "
                                        r"is an int: to clear one buffer, call clear\(buf\)"):
        cp.clear_many(buf)
    assert all(bytes(buf))


@pytest.mark.parametrize("value", ["no", "", 0, 1, None, "False"])
def test_set_adaptive_takes_a_bool_only(value):
    before = cp.adaptive()
    with pytest.raises(TypeError, match="set_adaptive takes True or False"):
        cp.set_adaptive(value)
    assert cp.adaptive() == before


def test_clear_pages_refuses_a_2d_index_array():
    np = pytest.importorskip("numpy")
    pool = bytearray(b"\x01" * 4 * 4096)
    for pages in (np.array([[0, 1]], dtype=np.int64), np.array([[0], [1]], dtype=np.int16),
                  memoryview(array.array("q", [0, 1])).cast("B").cast("q", (1, 2))):
        with pytest.raises(ValueError, match="pages must be a 1-D sequence of page indices, "
                                             "not a 2-D array"):
            cp.clear_pages(pool, pages)
    assert all(pool)


_ROOT = Path(__file__).resolve().parent.parent


def _c_messages():
    """The text of every exception message the C entries raise, adjacent
    literals joined (where the sources are beside the tests)."""
    found = []
    for f in sorted((_ROOT / "csrc" / "pyext").glob("*.c")):
        src = f.read_text()
        for m in re.finditer(r'PyErr_(?:Format|SetString)\(\s*[^,]+,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)',
                             src):
            found.append((f.name, "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)))))
    return found


def _python_messages():
    """The literal text of every exception the package raises."""
    found = []
    for f in sorted((_ROOT / "clearpages").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                arg = node.exc.args[0]
                if isinstance(arg, ast.BinOp):
                    arg = arg.left
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((f.name, arg.value))
    return found


def test_messages_are_spaced_as_sentences():
    """One space between words and after a full stop, in every message."""
    if not (_ROOT / "csrc").is_dir():
        pytest.skip("the sources are not beside the tests (testing an installed wheel)")
    messages = _c_messages() + _python_messages()
    assert len(messages) > 100
    doubled = [(f, m) for f, m in messages if "  " in m.strip()]
    assert not doubled, doubled


@pytest.mark.parametrize("call", [cp.clear, lambda r: cp.clear_many([r]),
                                  lambda r: cp.clear_pages(r, [0])],
                         ids=["clear", "clear_many", "clear_pages"])
def test_a_resize_while_a_call_holds_the_region_names_the_call(call):
    """The caller of resize holds no view: the message says a clearpages
    call in progress holds the Region, not that a view exists."""
    import threading

    from clearpages.tools.lowlevel import fast

    r = cp.Region(64 << 10)
    refusals: list[str] = []

    def resize_elsewhere() -> None:
        try:
            r.resize(128 << 10)
        except BufferError as e:
            refusals.append(str(e))

    def hook(where, routine, n):
        # The call holds the Region here: resize it from another thread.
        if where == "acquired" and not refusals:
            t = threading.Thread(target=resize_elsewhere)
            t.start()
            t.join()

    fast._set_debug_hook(hook)
    try:
        call(r)
    finally:
        fast._set_debug_hook(None)
    assert refusals and "while a clearpages call" in refusals[0], refusals
    assert "view" not in refusals[0]
    r.resize(128 << 10)         # once the call returned
    assert r.size == 128 << 10
    r.close()
