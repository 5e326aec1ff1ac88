"""pytest configuration for the benchmark suite.

    python -m pytest bench -k quick          # smoke subset, under two minutes
    python -m pytest bench                   # everything below 512 MiB, and scaled sets
    python -m pytest bench --slow            # plus the 512 MiB and 1 GiB cases

--bench-scale (or CLEARPAGES_BENCH_SCALE) multiplies the 1 GiB working sets of
bench_multi, bench_hot and the other full-size cases.  After the run a summary
prints each goal's ratios side by side.
"""

from __future__ import annotations

import os

import _common
import pytest

SLOW_ENV = "CLEARPAGES_BENCH_SLOW"


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("clearpages bench")
    g.addoption("--slow", action="store_true", default=False,
                help="also run the 512 MiB and 1 GiB cases (marker 'slow')")
    g.addoption("--bench-scale", default=None, metavar="X",
                help="multiply the 1 GiB working sets by X (CLEARPAGES_BENCH_SCALE)")


def pytest_configure(config: pytest.Config) -> None:
    scale = config.getoption("--bench-scale")
    if scale is not None:
        # Read when the bench modules are imported, i.e. after this.
        os.environ["CLEARPAGES_BENCH_SCALE"] = scale


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = (config.getoption("--slow") or os.environ.get(SLOW_ENV, "") not in ("", "0")
              or "slow" in (config.getoption("-m") or ""))
    if wanted:
        return
    skip = pytest.mark.skip(reason="a slow (512 MiB-1 GiB) case: run with --slow "
                                   "or %s=1" % SLOW_ENV)
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


class BufferCache:
    """Prefaulted buffers shared by the cases of one size; only one large
    buffer is kept at a time, so a run stays within a few GiB."""

    LARGE = 64 * _common.MiB

    def __init__(self) -> None:
        self._bufs: dict[tuple[int, str], _common.Buffer] = {}

    def get(self, nbytes: int, tag: str = "") -> _common.Buffer:
        key = (nbytes, tag)
        buf = self._bufs.get(key)
        if buf is None:
            if nbytes >= self.LARGE:
                for k in [k for k in self._bufs if k[0] >= self.LARGE]:
                    self._bufs.pop(k).close()
            buf = self._bufs[key] = _common.Buffer(nbytes)
        return buf

    def drop(self) -> None:
        for b in self._bufs.values():
            b.close()
        self._bufs.clear()


@pytest.fixture(scope="session")
def buffers():
    cache = BufferCache()
    yield cache
    cache.drop()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    parts = []
    for fn in _common.SUMMARIES:
        got = fn()
        if got is not None:
            parts.append(got)
    parts.extend(_common.TABLES)
    if not parts:
        return
    tr = terminalreporter
    tr.section("clearpages: goals and tables")
    tr.write_line(_common.machine_label())
    for title, text in parts:
        tr.write_line("")
        tr.write_line(title)
        for line in text.splitlines():
            tr.write_line(line)
