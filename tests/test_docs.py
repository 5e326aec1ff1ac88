"""The README is a contract too: its method table is the routine table, its
examples run, it opens with the two commands, and it names every variable.

`python -m tests.test_docs` (from the repository root) prints the method
table to paste into the README.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import clearpages as cp
from clearpages import _config
from clearpages._routines import ROUTINES, Routine

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

BEGIN = "<!-- methods-table:begin"
END = "<!-- methods-table:end -->"

TWO_COMMANDS = (
    "pip install -e . && python -m clearpages bench --quick",
    "pip install -e '.[test]' && python -m pytest",
)


def _needs(r: Routine) -> str:
    if r.requires:
        return ", ".join(sorted(r.requires))
    return "x86-64" if r.source.startswith("asm/") else "any CPU"


def methods_table() -> str:
    """The README's method table, from the routine table."""
    rows = ["| method | stores | needs | what |", "|---|---|---|---|"]
    for r in ROUTINES:
        rows.append("| `%s` | %s | %s | %s |" % (
            r.name, "temporal" if r.temporal else "streaming", _needs(r), r.summary))
    return "\n".join(rows)


@pytest.fixture(scope="module")
def readme() -> str:
    if not README.exists():
        pytest.skip("README.md is not beside the tests (testing an installed wheel)")
    return README.read_text(encoding="utf-8")


def test_readme_opens_with_the_two_commands(readme):
    first_block = re.search(r"```(?:sh|bash|console)?\n(.*?)```", readme, re.S)
    assert first_block is not None, "README has no code block"
    assert readme.index("```") < readme.index("\n## "), \
        "the commands must come before the first section"
    lines = [ln.strip() for ln in first_block.group(1).splitlines() if ln.strip()]
    assert tuple(lines[:2]) == TWO_COMMANDS


def test_method_table_matches_the_routine_table(readme):
    assert BEGIN in readme and END in readme, "method table markers missing"
    start = readme.index("\n", readme.index(BEGIN)) + 1
    table = readme[start:readme.index(END)].strip()
    assert table == methods_table(), (
        "README's method table differs from clearpages/_routines.py; "
        "replace it with the output of `python -m tests.test_docs`:\n" + methods_table())


def test_every_method_is_documented(readme):
    for r in ROUTINES:
        assert "`%s`" % r.name in readme
    assert "`discard`" in readme


@pytest.mark.parametrize("name", _config.VARIABLES + ("CLEARPAGES_PORTABLE",))
def test_every_environment_variable_is_documented(readme, name):
    assert re.search(r"^\| `%s` \|" % name, readme, re.M), \
        "%s is missing from the README's variable table" % name


def test_results_and_changelog_are_linked(readme):
    assert "(docs/results.md)" in readme
    assert "(CHANGELOG.md)" in readme


def _python_blocks() -> list[str]:
    if not README.exists():
        return []
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_example_runs(index):
    """Each python example runs as written (numpy and torch ones skip
    without them)."""
    code = _python_blocks()[index]
    for module in ("numpy", "torch"):
        if "import %s" % module in code:
            pytest.importorskip(module)
    exec(compile(code, "README.md example %d" % index, "exec"), {"__name__": "readme"})


def test_numpy_examples_say_numpy_is_needed(readme):
    """The first command does not install numpy: each example that imports
    it says so in the prose just before it."""
    parts = re.split(r"(```python\n.*?```)", readme, flags=re.S)
    for i, part in enumerate(parts):
        if part.startswith("```python") and "import numpy" in part:
            assert "pip install numpy" in parts[i - 1], \
                "the README example before %r does not say numpy is needed" % part[:60]


if __name__ == "__main__":
    print(methods_table())


def test_results_hold_the_profile_tables():
    """docs/results.md shows every profile in profiles/ and the replay of the
    current default policy: regenerate with `python bench/profile_tables.py --write`."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "profile_tables.py"), "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, ("docs/results.md is out of date with profiles/ or the "
                               "policy: run python bench/profile_tables.py --write\n" + r.stderr)


def test_readme_says_how_to_wipe_secrets(readme):
    assert "\n## Wiping secrets\n" in readme
    part = readme.split("\n## Wiping secrets\n", 1)[1].split("\n## ", 1)[0]
    for words in ("lock=True", "dump=False", 'fork="wipe"', "RLIMIT_MEMLOCK",
                  "never elided", "cannot reach", "bytes", "swap"):
        assert words in part, words


def test_the_repository_speaks_for_itself():
    """Goals and reasons are stated here, in the repository's own words: no
    code, bench script or document cites a specification a user does not have."""
    found = []
    for top in ("clearpages", "bench", "docs", "csrc", "asm", "tests"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".py", ".md", ".c", ".h", ".S", ".pyi") and path.is_file():
                text = path.read_text(errors="replace")
                if re.search(r"\bSPEC\b", text) and path.name != "test_docs.py":
                    found.append(str(path.relative_to(ROOT)))
    for name in ("README.md", "CHANGELOG.md"):
        if re.search(r"\bSPEC\b", (ROOT / name).read_text()):
            found.append(name)
    assert not found, found


def test_one_word_for_the_stores_that_bypass_the_cache(readme):
    """'streaming', as info, plan and the code say it: the README gives the
    manuals' 'non-temporal' once, where it says what the word means, and
    says what a read-for-ownership is where it first uses the word."""
    text = " ".join(readme.split())
    assert text.count("non-temporal") == 1, text.count("non-temporal")
    assert "*streaming* (non-temporal) stores write whole lines" in text
    said = "read each cache line in before writing it (the read-for-ownership)"
    assert text.index("read-for-ownership") == text.index(said) + len(said) - 19
    assert "non-temporal" not in " ".join(r.summary for r in ROUTINES)
    assert "non-temporal" not in cp.plan(1 << 30).reason


def test_the_readme_says_when_checking_first_pays(readme):
    """On memory in use a scan is slower than a clear here: the README must
    not say that reading is cheaper, and says when checking first pays."""
    text = " ".join(readme.split())
    assert "Reading is cheaper than writing" not in text
    assert "**When checking first pays.**" in text
    for case in ("never touched", "copy-on-write", "bench --scan"):
        assert case in text.split("**When checking first pays.**", 1)[1][:1500], case


# ---- help(): the public calls' docstrings -----------------------------------


def test_the_calls_say_what_they_return_take_and_raise():
    clear = cp.clear.__doc__ or ""
    for words in ("Returns None", "TypeError", "ValueError", "UnsupportedMethod",
                  "(start, stop)", "contiguous", "from 1 to 256"):
        assert words in clear, words
    many = " ".join((cp.clear_many.__doc__ or "").split())
    for words in ("Returns None", "method:", "threads:", "There is no hot=",
                  "before anything is written"):
        assert words in many, words
    assert "threads:" in (cp.is_zero.__doc__ or "")
    pages = " ".join((cp.clear_pages.__doc__ or "").split())
    for words in ("list, tuple, range", "array.array", "numpy integer array",
                  'size string such as "64K" or "2M"', "PageIndexError", "Fortran"):
        assert words in pages, words


def test_the_type_checking_stubs_carry_the_native_docstrings():
    """_core's and _scan's stubs (what an editor shows from the sources)
    say what help() says."""
    import ast
    import inspect

    from clearpages import _core, _scan

    for module, names in ((_core, ("clear", "clear_many", "clear_pages")),
                          (_scan, ("is_zero",))):
        tree = ast.parse(inspect.getsource(module))
        stubs = {n.name: ast.get_docstring(n) for n in ast.walk(tree)
                 if isinstance(n, ast.FunctionDef) and n.name in names}
        for name in names:
            native = inspect.cleandoc(getattr(cp, name).__doc__ or "")
            assert stubs.get(name) == native, name
