"""The command line reads as prose: lines within the terminal's width (80
columns unless COLUMNS says otherwise), reasons that are one plain sentence,
every command described, sizes said for what they are."""

from __future__ import annotations

import importlib.util
import io
import re

import pytest
from test_cli import CAL_TINY, TINY

import clearpages as cp
from clearpages import _policy
from clearpages.tools.cli import main, parser

WIDTH = 80

#: The program and pool benchmarks refuse to run without numpy.
needs_numpy = pytest.mark.skipif(importlib.util.find_spec("numpy") is None,
                                 reason="numpy is not installed (the benchmark needs it)")


@pytest.fixture(autouse=True)
def no_columns(monkeypatch):
    """The width this file means: no COLUMNS from the caller's terminal."""
    monkeypatch.delenv("COLUMNS", raising=False)


def call(*args: str) -> str:
    out = io.StringIO()
    assert main(list(args), out=out) == 0
    return out.getvalue()


def too_wide(text: str, width: int = WIDTH) -> list[str]:
    """The lines past the width, but for a lone word (a path) longer than
    the width itself, which is never broken."""
    return [ln for ln in text.splitlines() if len(ln) > width and len(ln.split()) > 1]


@pytest.mark.parametrize("args", [
    ("info",),
    ("plan", "4K"),
    ("plan", "4K", "--count", "1000"),
    ("plan", "1M"),
    ("plan", "1G"),
    ("plan", "64M", "--threads", "auto"),
    ("bench", "--sizes", "4K,1M", *TINY),
    ("bench", "--sizes", "4K", "--methods", "auto,libc", *TINY),
    ("bench", "--scan", "--sizes", "64K", *TINY),
    pytest.param(("bench", "--programs", "--sizes", "16K", "--repeat", "2", "--target-ms",
                  "0.05", "--quiet"), marks=needs_numpy),
    pytest.param(("bench", "--pool", "--quick", "--quiet"), marks=needs_numpy),
])
def test_every_line_fits_in_80_columns(args):
    assert too_wide(call(*args)) == []


@pytest.mark.parametrize("args", [
    ("info",),
    ("plan", "1G"),
    ("bench", "--sizes", "4K,1M", *TINY),
])
def test_columns_is_the_width_and_wide_lifts_it(args, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    narrow = call(*args)
    assert too_wide(narrow, 60) == [], narrow
    monkeypatch.delenv("COLUMNS")
    wide = call(*args, "--wide")
    assert max(map(len, wide.splitlines())) > WIDTH


def test_calibrate_fits_in_80_columns(tmp_path):
    assert too_wide(call("calibrate", "--output", str(tmp_path / "p.json"), *CAL_TINY)) == []


def test_a_table_too_wide_for_its_words_drops_optional_columns_and_says_so(monkeypatch):
    from clearpages.tools.output import table

    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    table([("a", "b" * 12, "c" * 12, "d" * 12)], ("one", "two", "three", "four"), out,
          optional=(2, 1))
    text = out.getvalue()
    assert "c" * 12 not in text and "b" * 12 in text and "d" * 12 in text
    assert "three not shown in 40 columns" in " ".join(text.split())
    assert max(map(len, text.splitlines())) <= 40


def test_tables_wrap_their_last_column_under_itself():
    from clearpages.tools.output import table

    out = io.StringIO()
    table([("a", "word " * 40)], ("name", "prose"), out)
    lines = out.getvalue().splitlines()
    assert len(lines) > 3 and max(map(len, lines)) <= WIDTH
    assert all(ln.startswith("      ") for ln in lines[3:])   # under the column


def one_plain_sentence(text: str) -> str | None:
    """Why text is not one plain sentence, or None."""
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth > 1:
            return "parentheses nest"
        if depth < 0:
            return "a ')' without its '('"
    if depth:
        return "an unclosed '('"
    if re.search(r"[.;!?]\s+\S", text):
        return "more than one sentence"
    return None


SIZES = [0, 100, 4096, 64 << 10, 1 << 20, 8 << 20, 64 << 20, 1 << 30]


@pytest.mark.auto_policy
@pytest.mark.parametrize("n", SIZES)
def test_a_reason_is_one_plain_sentence(n):
    for kw in ({}, {"count": 1000}, {"threads": "auto"}, {"threads": 2}, {"hot": True},
               {"hot": False}, {"hot": (0, n // 2)}):
        if n == 0 and "hot" in kw and kw["hot"] not in (True, False):
            continue
        p = cp.plan(n, **kw)
        why = one_plain_sentence(p.reason)
        assert why is None, "%s: %s: %r" % (kw, why, p.reason)
        assert_evidence_matches(p, cp.thresholds())


#: How a reason names each threshold whose evidence goes beside it.
NAMED = {"nt_min": "streaming threshold", "vector_max": "vector_max", "long_min": "long_min",
         "thread_min": "thread_min", "hot_max": "hot_max", "hot_max_other": "hot_max_other"}


def assert_evidence_matches(p, th):
    """Every threshold the reason names has its line of evidence, and every
    line of evidence is for a threshold (or role's routine) the reason or
    what was learned names (plan(hot=True) of a size between hot_max_other
    and hot_max: the buffer's history sets the tail, hot_max_other)."""
    fields = [e.split(":")[0].split(" ")[0] for e in p.evidence]
    assert len(set(fields)) == len(fields), p.evidence
    for field, words in NAMED.items():
        if re.search(r"\b%s\b" % words, p.reason):
            assert field in fields, (field, p.reason, p.evidence)
    said = p.reason + " " + (p.learned or "")
    for field in fields:
        named = NAMED.get(field)
        assert (named and named in said) or str(getattr(th, field)) in said, \
            (field, p.reason, p.learned, p.evidence)


def test_synthetic_cpus_reasons_too():
    from test_cpu import ICE, MILAN, OLD
    from test_policy import EMR_GUEST, ZEN3_GUEST, ZEN4

    for cpu in (EMR_GUEST, ZEN3_GUEST, ZEN4, ICE, MILAN, OLD):
        for built in (frozenset(cp.ALL_METHODS), frozenset({"libc"})):
            th = _policy.default_thresholds(cpu, built)
            for n in SIZES:
                for count in (1, 512):
                    for threads in (1, "auto"):
                        p = _policy.plan(cpu, th, n, count, threads=threads)
                        assert one_plain_sentence(p.reason) is None, p.reason
                        assert_evidence_matches(p, th)


@pytest.mark.auto_policy
def test_the_reasons_evidence_is_printed_by_plan():
    out = call("plan", "4K")
    for why in cp.plan(4096).evidence:
        assert why.split(":")[0] in out
    assert "because" in out


def test_every_command_has_a_description():
    sub = next(a for a in parser()._actions if a.dest == "command")
    for name, p in sub.choices.items():
        assert p.description and len(p.description) > 40, name
    assert "caches" in sub.choices["info"].format_help()


def test_plan_says_size_is_the_total():
    out = call("plan", "4K", "--count", "1000")
    assert "in 1000 pieces: SIZE is the total" in out
    assert "SIZE is the total" in parser()._actions[-1].choices["plan"].format_help()


def test_plan_says_one_call_for_a_small_clear_and_no_chunk():
    out = call("plan", "4K")
    assert "one call" in out and "chunk" not in out and "32 MiB" not in out.split("reason")[0]
    big = call("plan", "1G")
    assert "native job" in big


def test_bench_names_ctypes_memset_and_heads_every_column():
    out = call("bench", "--sizes", "4K", *TINY)
    assert "ctypes.memset" in out and "x libc" in out
    head = next(ln for ln in out.splitlines() if ln.startswith("size "))
    assert head.split()[-1] == "note"
    assert not re.search(r"^\s*memset\s", out, re.M)      # no bare "memset" row
