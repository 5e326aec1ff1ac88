"""The dispatch state: one owner, built on first use, never at import.

Everything read once (the CPU, the CLEARPAGES_* variables, the calibration,
the thresholds, the routines this machine runs) lives in one :class:`State`.
:func:`state` builds it the first time anything needs it and configures the
native entry (``clearpages._fast``) with the numbers of the policy
(``_policy.native_policy``), which the native rules read on every call;
:func:`reload` replaces it whole, or not at all.
Other modules read it through :func:`state` and its named fields; none
keeps a copy.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from . import _adapt, _calibration, _config, _cpu, _fast, _policy, _scan
from ._errors import ForcedMethodUnsupported, UnsupportedMethod, print_alone_if_uncaught
from ._native import ffi, lib
from ._routines import BY_NAME, ROUTINES

#: How long one native time slice may run before Python gets control back
#: (signal handlers, KeyboardInterrupt).  Ctrl-C is answered within a slice
#: plus one unit.
SLICE_NS = 40_000_000

#: The routines this build has (a portable build: libc alone).
BUILT = frozenset(r.name for r in ROUTINES if hasattr(lib, r.symbol))


class State:
    """Everything read once: the CPU, the variables, the thresholds, the routines."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        raw_cpu = _cpu.probe()
        config = (_config.read(env, _cpu.FEATURE_NAMES) if env is not None
                  else _config.read_environ(_cpu.FEATURE_NAMES))
        self.config = config
        self.raw_cpu = raw_cpu
        self.cpu = raw_cpu.without(config.disable)
        self.built = BUILT
        self.methods = tuple(r.name for r in ROUTINES
                             if _policy.usable(r.name, self.cpu, self.built))
        #: name -> the cffi function (benchmarks and calibration call it
        #: directly), and its address as a cffi pointer.
        self.direct = {name: getattr(lib, BY_NAME[name].symbol) for name in self.methods}
        self.pointer = {name: ffi.addressof(lib, BY_NAME[name].symbol)
                        for name in self.methods}
        #: The entry a job calls (a streaming routine's unfenced one), for
        #: tests and benchmarks that drive cp_job_* themselves.
        self.job_pointer = {name: ffi.addressof(lib, BY_NAME[name].unfenced or
                                                BY_NAME[name].symbol)
                            for name in self.methods}
        th = _policy.default_thresholds(self.cpu, self.built)
        self.calibration = _calibration.load(self.cpu, self.methods, config.calibration, th)
        if self.calibration is not None:
            th = self.calibration.thresholds
        if config.nt_threshold is not None:
            th = _policy.with_nt_threshold(th, config.nt_threshold)
        th = _policy.with_adaptive_band(self.cpu, th)
        self.thresholds = th
        self.forced = config.method
        _check_forced(config, raw_cpu, self.built)
        #: The zero scan is_zero and nonzero_pages use (csrc/core/scan.c).
        self.scan = _scan.choose(self.cpu)
        self.set_adaptive(config.adapt)

    def set_adaptive(self, on: bool) -> None:
        """Whether auto adapts (configure_native() tells the learner and C)."""
        th = self.thresholds
        #: What CLEARPAGES_ADAPT or set_adaptive() asked for.
        self.adapt_on = bool(on)
        #: Whether adaptive auto is on: asked for, with a band of sizes to
        #: adapt in and no routine forced.  The one answer to "is adaptation
        #: on": the native policy, the learner and plan() read it.
        self.adapt_active = (self.adapt_on and self.forced is None
                             and th.adapt_min < th.adapt_max)

    def configure_native(self, forget: bool = True) -> None:
        """Make this the policy the native entry and the learner follow
        (forget: the learner forgets what it learned; else it only pauses
        or resumes)."""
        th = self.thresholds
        if forget:
            _adapt.configure(th, self.forced is None, self.adapt_active,
                             _policy.recent_threshold(self.cpu), self.cpu.l2,
                             window=_policy.keeps_whole_l3(self.cpu))
        else:
            _adapt.enable(self.adapt_active)
        # Jobs call a streaming routine's unfenced entry for every extent and
        # fence once per thread: a fence per 4 KiB page cost a third of the
        # throughput of scattered pages.
        routines = tuple((r.name, bool(r.unfenced), r.temporal, r.name in self.methods)
                         for r in ROUTINES)
        policy = _policy.native_policy(self.cpu, th, self.forced, self.adapt_active)
        _fast.configure(routines=routines, policy=bytes(ffi.buffer(policy)),
                        gil_min=_policy.GIL_RELEASE_MIN, slice_ns=SLICE_NS)
        _fast.set_scan(_scan.variant_index(self.scan))

    def missing(self, name: str) -> str | None:
        """Why this machine cannot run the routine, or None if it can."""
        return _missing(name, self.raw_cpu, self.config.disable, self.built)

    def check(self, what: str, name: str) -> None:
        why = self.missing(name)
        if why is not None:
            raise UnsupportedMethod("%s: %s" % (what, why))


def _missing(name: str, raw_cpu: _cpu.CPU, disable: frozenset[str],
             built: frozenset[str]) -> str | None:
    """Why this machine (its CPU before CLEARPAGES_DISABLE, the features
    that masks, the routines built) cannot run the routine, or None."""
    r = BY_NAME[name]
    if name not in built:
        return "%s is not in this build (a portable build has only libc)" % name
    for feat in sorted(r.requires):
        if feat in raw_cpu.features and feat in disable:
            return "%s needs %s, masked by CLEARPAGES_DISABLE" % (name, feat)
        if feat in raw_cpu.os_disabled:
            return ("%s needs %s, which the CPU has but the OS has not enabled "
                    "(its register state is off in XCR0)" % (name, feat))
        if feat not in raw_cpu.features:
            return "%s needs %s, which this CPU lacks" % (name, feat)
    return None


def _check_forced(config: _config.Config, raw_cpu: _cpu.CPU | None = None,
                  built: frozenset[str] = BUILT) -> None:
    """A CLEARPAGES_METHOD this machine cannot run is a bad variable: a
    ConfigError that is also an UnsupportedMethod, raised where the others
    are (at import, by reload_config), not by the first call.  Without
    raw_cpu, CPUID alone is read, and only for a routine that needs a
    feature or may be missing from the build."""
    name = config.method
    if name is None:
        return
    if raw_cpu is None:
        if name in built and not BY_NAME[name].requires:
            return
        raw_cpu = _cpu.probe(caches=False)
    why = _missing(name, raw_cpu, config.disable, built)
    if why is not None:
        raise ForcedMethodUnsupported("CLEARPAGES_METHOD=%s: %s" % (name, why))


_current: State | None = None
_lock = threading.RLock()     # a signal handler may clear while the state is built


def _lock_after_fork() -> None:
    """A fork while another thread held the lock leaves the child a lock
    no thread of it will release: it gets a new one (unless the forking
    thread itself holds it, inside a build)."""
    global _lock
    if not _lock._is_owned():     # type: ignore[attr-defined]
        _lock = threading.RLock()


os.register_at_fork(after_in_child=_lock_after_fork)

# A bad CLEARPAGES_* value stops the import, naming the variable (reading
# the environment is no I/O; CPUID is read only for a forced routine that
# needs a feature; the caches, the calibration file and the routing wait
# for first use).
_check_forced(_config.read_environ(_cpu.FEATURE_NAMES))


def state() -> State:
    """The dispatch state, built (and the native entry configured) on first use."""
    st = _current
    if st is None:
        st = _build(None)
    return st


def _build(env: dict[str, str] | None, replace: bool = False) -> State:
    global _current
    with _lock:
        if _current is not None and not replace:
            return _current
        try:
            st = State(env)     # raises on a bad variable: nothing changes then
        except _config.ConfigError as e:
            # Its message says it all, as at import: one line if uncaught,
            # not the frames of the package that read it.
            print_alone_if_uncaught(e)
            raise e.with_traceback(None) from None
        st.configure_native()
        _current = st
        return st


def reload(env: dict[str, str] | None = None) -> None:
    """Read the CLEARPAGES_* variables (and the calibration) again."""
    _build(env, replace=True)


def set_adaptive(on: bool) -> None:
    """Turn adaptive auto on or off in the current state (until reload),
    keeping what the learner learned."""
    state()
    with _lock:
        st = _current
        assert st is not None
        st.set_adaptive(on)
        st.configure_native(forget=False)


def built() -> bool:
    """Whether the state exists yet (nothing builds it at import)."""
    return _current is not None


def init_native() -> Any:
    """The native entry's first-use hook."""
    state()
    return None
