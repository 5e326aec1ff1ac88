"""Sizes read the same way everywhere: the API, the command line, the environment."""

from __future__ import annotations

import pytest
from conftest import run_python

import clearpages as cp
from clearpages import _units
from clearpages.tools.cli import main

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize("text, n", [("4096", 4096), ("64K", 64 * KiB), ("2m", 2 * MiB),
                                     ("1G", GiB), ("2GiB", 2 * GiB), ("5kb", 5 * KiB),
                                     (" 8 M ", 8 * MiB), (4096, 4096)])
def test_one_reading_of_a_size(text, n):
    assert _units.parse_size(text) == n


def test_plan_takes_a_size_as_text():
    assert cp.plan("1G") == cp.plan(GiB)
    assert cp.plan("4k").nbytes == 4096


def test_region_and_resize_take_sizes_as_text():
    with cp.Region("64M") as r:
        assert r.size == 64 * MiB
        r.resize("2G")
        assert r.size == 2 * GiB
        r.resize("4k")
        assert r.size == 4096
    with cp.Region("3M", page_size="2M") as r:
        assert r.size == 4 * MiB and r.page_size_name == "2m"
    with cp.Region(4096, page_size="4KiB") as r:
        assert r.page_size == 4096


def test_clear_pages_takes_a_page_size_as_text():
    pool = bytearray(b"\x01" * (4 * 2 * MiB))
    cp.clear_pages(pool, [1, 3], page_size="2m")
    assert not any(pool[2 * MiB:4 * MiB]) and not any(pool[6 * MiB:])
    assert all(pool[:2 * MiB]) and all(pool[4 * MiB:6 * MiB])


BAD = "size must be a byte count such as 4096, 64K, 64M or 1G"


@pytest.mark.parametrize("call, what", [
    (lambda v: cp.plan(v), "nbytes"),
    (lambda v: cp.Region(v), "size"),
    (lambda v: cp.clear_pages(bytearray(8192), [0], page_size=v), "page_size"),
    (lambda v: cp.Region(4096).resize(v), "new_size"),
])
@pytest.mark.parametrize("value, kind", [("64Q", ValueError), ("1.5M", ValueError),
                                         ("lots", ValueError), (1.5, TypeError),
                                         (True, TypeError)])
def test_one_message_everywhere(call, what, value, kind):
    """Text that is no size is a ValueError, another type a TypeError: one
    message for both, naming the argument and the spellings."""
    with pytest.raises(kind) as e:
        call(value)
    assert str(e.value) == _units._spellings(what, value)
    assert BAD.replace("size", what, 1) in str(e.value)


def test_the_command_line_and_the_environment_say_the_same(capsys):
    assert main(["plan", "64Q"]) == 2
    assert BAD in capsys.readouterr().err
    r = run_python("import clearpages", {"CLEARPAGES_NT_THRESHOLD": "64Q"})
    assert "CLEARPAGES_NT_THRESHOLD must be a byte count such as 4096, 64K" in r.stderr


@pytest.mark.parametrize("value", ["%dT" % (1 << 20), 1 << 60])
def test_too_large_is_said_the_same_way(value):
    with pytest.raises(ValueError, match="larger than any memory"):
        cp.plan(value)
