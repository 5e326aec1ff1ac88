"""What a first try gets wrong gets a message that says what to do instead."""

from __future__ import annotations

import array
import ast
import copy
import io
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


# ---- each message says what is wrong, with its own limit ------------------------


def test_a_negative_move_address_says_it_must_be_positive():
    with cp.Region(4096) as r:
        for bad in (-1, -4096, 0):
            with pytest.raises(ValueError, match="address must be a positive multiple of the "
                                                 "page size"):
                r.move_to(bad)
        with pytest.raises(ValueError, match="not a multiple of the page size"):
            r.move_to(r.page_size * 1024 + 1)


def test_each_threads_limit_is_stated_as_its_own():
    """A populate spreads over at most 64 threads, a clear runs on up to 256:
    each message states its own limit, and the populate's says why."""
    from clearpages.tools.lowlevel import fast

    for call in (lambda: cp.Region(4096, threads=0),
                 lambda: cp.Region(4096).populate(threads=65)):
        with pytest.raises(ValueError, match=r"from 1 to 64 \(the most a populate spreads"):
            call()
    for call in (lambda: cp.clear(bytearray(1), threads=0),
                 lambda: cp.clear(bytearray(1), threads=fast.MAX_THREADS + 1)):
        with pytest.raises(ValueError, match="from 1 to %d" % fast.MAX_THREADS):
            call()


@pytest.mark.parametrize("bufs", [None, 5, 2.5])
def test_clear_many_of_no_iterable_says_what_it_takes(bufs):
    with pytest.raises(TypeError, match=r"clear_many takes an iterable of buffers \(a list or "
                                        r"tuple .*\), not %s" % type(bufs).__name__):
        cp.clear_many(bufs)


def test_a_region_a_pool_and_a_block_cannot_be_copied():
    with cp.Region(4096) as r:
        for how in (copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match="a Region is process memory and cannot be "
                                                "copied"):
                how(r)
    with cp.Pool("64K", page_size="4k") as pool, pool.acquire() as blk:
        for how in (copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=r"a Pool .* cannot be copied"):
                how(pool)
            with pytest.raises(TypeError, match=r"a Block .* cannot be copied"):
                how(blk)


@pytest.mark.parametrize("buf", [bytearray(), memoryview(bytearray(8))[:0]])
def test_a_page_of_an_empty_buffer_says_it_has_no_pages(buf):
    with pytest.raises(cp.PageIndexError, match="it is empty, so it has no pages") as e:
        cp.clear_pages(buf, [0])
    assert "-1" not in str(e.value)


def test_plan_of_one_byte_says_one_byte():
    from clearpages.tools.cli import main

    out = io.StringIO()
    assert main(["plan", "1"], out=out) == 0
    first = out.getvalue().splitlines()[0]
    assert first.startswith("plan for 1 byte in one piece"), first
    out = io.StringIO()
    assert main(["plan", "100", "--count", "3"], out=out) == 0
    assert "plan for 100 bytes in 3 pieces" in out.getvalue()
    assert "33 bytes a piece" in " ".join(out.getvalue().split())


def test_plan_of_more_pieces_than_bytes():
    """clear_many takes empty pieces; plan describes such a call too."""
    p = cp.plan(4, count=1000)
    assert p.count == 1000 and p.method == cp.plan(4, count=2).method
    from clearpages.tools.cli import main

    out = io.StringIO()
    assert main(["plan", "4", "--count", "1000"], out=out) == 0
    assert "under 1 byte a piece" in out.getvalue()
    cp.clear_many([bytearray(), bytearray(), bytearray(1)])
