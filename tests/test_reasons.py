"""A decision carries its reasons: csrc/core/policy.c says which rule fired
(the decision's reason codes), Python maps each code to a sentence, and no
code outside policy.c works a rule out a second time."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
from conftest import ROOT
from test_policy import ALL, ZEN3_GUEST, ZEN4

import clearpages as cp
from clearpages import _dispatch, _fast, _policy
from clearpages._native import ffi, lib

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PKG = Path(cp.__file__).resolve().parent

# ---- nothing works a rule out again -----------------------------------------

#: The numbers the rules compare a size with.  Comparing a size with one of
#: them (<, <=, >, >=) is stating a rule; csrc/core/policy.c alone does.
THRESHOLDS = {"nt_min", "vector_max", "long_min", "thread_min", "hot_max", "hot_max_other",
              "adapt_min", "adapt_max", "untouched_min", "hot_nbytes"}

#: Where Python compares them anyway, and why that is no rule of the policy.
ALLOWED = {
    ("_dispatch.py", "set_adaptive"): "adapt_active, the one answer to 'is adaptation on'",
    ("_adapt.py", "configure"): "the learner's band, configured from the thresholds",
}

ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def rule_statements(source: str) -> list[tuple[str, int, str]]:
    """(function, line, text) of each ordering comparison with a threshold."""
    out = []
    tree = ast.parse(source)
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        name = getattr(fn, "name", "<lambda>")
        for node in ast.walk(fn):
            if not isinstance(node, ast.Compare) or not any(
                    isinstance(op, ORDER) for op in node.ops):
                continue
            names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if names & THRESHOLDS:
                out.append((name, node.lineno, ast.unparse(node)))
    return out


PYTHON = sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", PYTHON, ids=lambda p: str(p.relative_to(PKG)))
def test_no_python_function_states_a_rule(path):
    found = [(fn, line, text) for fn, line, text in rule_statements(path.read_text())
             if (path.name, fn) not in ALLOWED]
    assert not found, "%s compares sizes with the policy's thresholds (ask the " \
        "decision's reason codes instead): %s" % (path.name, found)


def test_the_check_sees_a_rule():
    src = ("def explain(th, d, nbytes):\n"
           "    if nbytes >= th.nt_min: pass\n"
           "    other = d.hot_nbytes < min(nbytes, th.hot_max)\n"
           "    return [s for s in sizes if th.vector_max <= s]\n")
    assert [line for _, line, _ in rule_statements(src)] == [2, 3, 4]
    # A threshold changed or kept is no rule: equality is not looked at.
    assert rule_statements("def f(th, d):\n    return th.nt_min != d.nt_min\n") == []


_OP = r"(?<![-<>])(?:<=?|>=?)(?![<>])"
_FIELD = r"(?:\w+(?:\.|->))*(?:%s)\b" % "|".join(sorted(THRESHOLDS))
#: A comparison with a threshold field: `n >= p->nt_min`, `config.policy.hot_max < n`.
C_RULE = re.compile(r"%s\s*%s|%s\s*%s" % (_OP, _FIELD, _FIELD, _OP))


@pytest.mark.parametrize("path", sorted((ROOT / "csrc").rglob("*.[ch]")),
                         ids=lambda p: str(p.relative_to(ROOT / "csrc")))
def test_no_c_file_but_the_policy_states_a_rule(path):
    if path.name in ("policy.c", "policy.h", "adapt.c"):
        pytest.skip("policy.c and policy.h state the rules; adapt.c is the learner, with "
                    "its own band")
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    found = C_RULE.search(text)
    assert not found, found


def test_the_c_check_sees_a_rule():
    for line in ("if (n <= config.policy.hot_max_other)", "x = p->nt_min > n;",
                 "return n>=config.policy.untouched_min;"):
        assert C_RULE.search(line), line
    for line in ("d->nt_min = 1;", "p->vector_max = v;", "x = a >> nt_min_shift;"):
        assert not C_RULE.search(line), line


# ---- every code has its sentence --------------------------------------------


def _codes(prefix: str) -> set[int]:
    return {getattr(lib, n) for n in dir(lib) if n.startswith(prefix)}


def test_every_reason_code_has_a_sentence():
    routes = {k if isinstance(k, int) else k[0] for k in _policy.ROUTE_REASONS}
    assert _codes("CP_WHY_") == routes
    assert _codes("CP_HOT_PART_") == set(_policy.HOT_EVIDENCE)
    assert _codes("CP_THREADS_") == set(_policy.THREADS_REASONS)
    assert _codes("CP_UNTOUCHED_") == set(_policy.UNTOUCHED_REASONS)
    # The learner's own codes are its sentences; the rest are the policy's.
    learner = {lib.CP_LEARNER_ASKED, lib.CP_LEARNER_HISTORY, lib.CP_LEARNER_FORCED,
               lib.CP_LEARNER_NO_BAND, lib.CP_LEARNER_OFF, lib.CP_LEARNER_OUTSIDE}
    assert _codes("CP_LEARNER_") == learner | set(_policy.LEARNER_REASONS)


# ---- the codes say which rule fired ------------------------------------------


def _d(th, n, count=1, threads=1, method="auto", hot=None, forced=None, cpu=ZEN4,
       adapt=False):
    return _policy.decision(_policy.native_policy(cpu, th, forced, adapt), n, count,
                            threads, method, hot)


def test_route_codes_name_the_rule_at_each_threshold():
    th = _policy.default_thresholds(ZEN4, ALL)
    assert _d(th, th.vector_max - 1).why == lib.CP_WHY_MEMSET
    assert _d(th, th.vector_max).why == lib.CP_WHY_MEMSET
    assert _d(th, th.vector_max + 1).why == lib.CP_WHY_TEMPORAL
    assert _d(th, th.nt_min - 1).why == lib.CP_WHY_TEMPORAL
    assert _d(th, th.nt_min).why == lib.CP_WHY_STREAMING
    assert _d(th, th.nt_min, method="rep_stosq").why == lib.CP_WHY_METHOD
    assert _d(th, 64, forced="libc").why == lib.CP_WHY_FORCED
    # the total decides, the piece size picks memset
    assert _d(th, 16 * th.vector_max - 16, count=16).why == lib.CP_WHY_MEMSET
    zen3 = _policy.default_thresholds(ZEN3_GUEST, ALL)
    assert _d(zen3, zen3.long_min, cpu=ZEN3_GUEST).why == lib.CP_WHY_LONG
    assert _d(zen3, zen3.long_min - 1, cpu=ZEN3_GUEST).why == lib.CP_WHY_STREAMING
    assert _d(zen3, zen3.long_min, threads=2, cpu=ZEN3_GUEST).why == lib.CP_WHY_STREAMING
    portable = _policy.default_thresholds(ZEN4, frozenset({"libc"}))
    assert {_d(portable, n).why for n in (0, 4 * KiB, 1 * GiB)} == {lib.CP_WHY_ONE_ROUTINE}
    no_erms = _policy.default_thresholds(ZEN4, ALL - {"rep_stosb"})
    assert _d(no_erms, no_erms.nt_min - 1).why == lib.CP_WHY_MEMSET_BELOW_NT


def test_hot_codes_name_the_tails_rule():
    th = _policy.with_adaptive_band(ZEN4, _policy.default_thresholds(ZEN4, ALL))
    assert th.hot_max_other < th.hot_max
    d = _d(th, th.hot_max, hot=True)
    assert (d.why, d.hot_why, d.hot_nbytes) == (lib.CP_WHY_HOT, lib.CP_HOT_PART_WHOLE,
                                                th.hot_max)
    d = _d(th, th.hot_max + 1, hot=True)
    assert (d.hot_why, d.hot_nbytes) == (lib.CP_HOT_PART_TAIL, th.hot_max)
    assert _d(th, 1 * MiB, hot=1000).hot_why == lib.CP_HOT_PART_RANGE
    assert _d(th, 1 * MiB, hot=False).why == lib.CP_WHY_NOT_SOON
    assert _d(th, 1 * MiB, hot=False).hot_why == lib.CP_HOT_PART_NONE
    # The tail of a buffer not cleared lately is hot_max_other, while adapting.
    policy = _policy.native_policy(ZEN4, th, adapt=True)
    n = th.hot_max * 4
    out = ffi.new("struct cp_decision *")
    lib.cp_policy_decide(policy, n, 1, lib.CP_POLICY_AUTO, 1, lib.CP_POLICY_HOT_ALL_OTHER, 0,
                         out)
    assert (out.hot_why, out.hot_nbytes, out.adapt_why) == (
        lib.CP_HOT_PART_OTHER, th.hot_max_other, lib.CP_LEARNER_HISTORY)
    # Not adapting, nothing is known of its history: hot_max for every buffer.
    off = _policy.native_policy(ZEN4, th, adapt=False)
    assert lib.cp_policy_hot_all(off, ffi.NULL, n) == lib.CP_POLICY_HOT_ALL
    assert _policy.decision(off, n, hot_nbytes=True).adapt_why == lib.CP_LEARNER_HINT
    # The tails alike: no history asked for.
    same = _policy.native_policy(ZEN4, dataclasses.replace(th, hot_max_other=th.hot_max),
                                  adapt=True)
    assert lib.cp_policy_hot_all(same, ffi.NULL, n) == lib.CP_POLICY_HOT_ALL


def test_hot_true_asks_the_learners_history(config):
    """While adapting, plan(hot=True) of a buffer larger than the reuse
    window gets hot_max_other (the learner never sees one cleared again)."""
    config({})
    st = _dispatch.state()
    th = st.thresholds
    if not st.adapt_active or th.hot_max_other >= th.hot_max:
        pytest.skip("not adapting here, or the two tails are alike")
    n = 4 * th.adapt_max
    d = _policy.Decision(*_fast.decide(n, 1, 1, "auto", True))
    assert (d.hot_why, d.adapt_why) == (lib.CP_HOT_PART_OTHER, lib.CP_LEARNER_HISTORY)
    assert "hot_max_other" in cp.plan(n, hot=True).reason


def test_learner_codes_say_why_it_is_asked_or_not():
    th = _policy.with_adaptive_band(ZEN4, _policy.default_thresholds(ZEN4, ALL))
    lo = th.adapt_min

    def why(n, **kw):
        return _d(th, n, adapt=kw.pop("adapt", True), **kw).adapt_why

    assert why(lo) == lib.CP_LEARNER_ASKED and _d(th, lo, adapt=True).adaptive
    assert why(lo - 1) == why(th.adapt_max) == lib.CP_LEARNER_OUTSIDE
    assert why(lo, adapt=False) == lib.CP_LEARNER_OFF
    assert why(lo, count=2) == why(lo, threads=2) == lib.CP_LEARNER_JOB
    assert why(lo, method=th.temporal) == lib.CP_LEARNER_METHOD
    assert why(lo, hot=False) == why(lo, hot=100) == lib.CP_LEARNER_HINT
    assert why(lo, forced="libc") == lib.CP_LEARNER_FORCED
    one = _policy.with_adaptive_band(ZEN4, _policy.default_thresholds(ZEN4, frozenset({"libc"})))
    assert _d(one, 64 * KiB, adapt=True).adapt_why == lib.CP_LEARNER_NO_BAND
    # only ASKED is adaptive
    assert not any(_d(th, lo, adapt=a, count=c).adaptive for a, c in ((False, 1), (True, 2)))


def test_threads_and_untouched_codes():
    th = _policy.default_thresholds(ZEN4, ALL)
    assert _d(th, 1 * GiB, threads=3).threads_why == lib.CP_THREADS_GIVEN
    assert _d(th, th.thread_min - 1, threads="auto").threads_why == lib.CP_THREADS_ONE
    d = _d(th, th.thread_min, threads="auto")
    assert (d.threads_why, d.threads) == (lib.CP_THREADS_BY_SIZE, 2)
    assert _d(th, _policy.UNTOUCHED_MIN).untouched_why == lib.CP_UNTOUCHED_LOOK
    assert _d(th, _policy.UNTOUCHED_MIN - 1).untouched_why == lib.CP_UNTOUCHED_SMALL
    never = _policy.native_policy(ZEN4, th)
    never.untouched_min = 0
    assert _policy.decision(never, 1 * GiB).untouched_why == lib.CP_UNTOUCHED_NEVER


def test_the_learners_seam_is_left_for_it():
    """The policy leaves ``learned`` to the learner's API."""
    th = _policy.with_adaptive_band(ZEN4, _policy.default_thresholds(ZEN4, ALL))
    assert _d(th, th.adapt_min, adapt=True).learned == lib.CP_LEARNED_NONE


def test_plan_reads_the_configured_decision(config):
    """plan()'s sentences are the reason tables' for the decision the
    configured policy made: forced, adaptation off and on."""
    config({"CLEARPAGES_ADAPT": "0"})
    st = _dispatch.state()
    if not st.thresholds.adapt_min < st.thresholds.adapt_max:
        pytest.skip("one routine here: no adaptive band")
    n = st.thresholds.adapt_min
    d = _policy.Decision(*_fast.decide(n))
    assert d.adapt_why == lib.CP_LEARNER_OFF and not cp.adaptive()
    assert "off" in cp.plan(n).learned
    config({})
    assert _policy.Decision(*_fast.decide(n)).adapt_why == lib.CP_LEARNER_ASKED
    assert cp.plan(n, count=2).learned == _policy.LEARNER_REASONS[lib.CP_LEARNER_JOB]
    assert cp.plan(n, hot=False).learned == _policy.LEARNER_REASONS[lib.CP_LEARNER_HINT]
