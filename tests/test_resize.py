"""Region.move and Region.resize: the kernel's mremap_test matrix and more.

The matrix follows tools/testing/selftests/mm/mremap_test.c: a source
mapping aligned to PTE, 1 MiB, PMD or PUD (and deliberately not to the next
level), moved to a destination with its own such alignment, contents from a
seeded random pattern checked afterwards.  As there, only the first bytes
are written and checked in big cases (CLEARPAGES_TEST_VERIFY_BYTES, default
4 MiB; 0 checks all of it), and the seed (CLEARPAGES_TEST_SEED, random when
unset) is printed so a failure can be replayed.
"""

from __future__ import annotations

import contextlib
import os
import random

import pytest
from conftest import not_under_sanitizers

import clearpages as cp
from clearpages import _region
from clearpages._native import lib

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PTE = 4 * KiB

SEED = int(os.environ.get("CLEARPAGES_TEST_SEED") or random.SystemRandom().randrange(1 << 32))
VERIFY = int(os.environ.get("CLEARPAGES_TEST_VERIFY_BYTES") or 4 * MiB)
print("test_resize: CLEARPAGES_TEST_SEED=%d CLEARPAGES_TEST_VERIFY_BYTES=%d" % (SEED, VERIFY))

LEVEL = {"pte": PTE, "1m": MiB, "pmd": 2 * MiB, "pud": GiB}
NEXT = {"pte": MiB, "1m": 2 * MiB, "pmd": GiB, "pud": None}


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * KiB
    return 0


def checked(size: int) -> int:
    return size if VERIFY == 0 else min(VERIFY, size)


class Pattern:
    """Seeded random bytes at the head and tail of a region (the tail too,
    unlike the kernel's test: the end is where a short move would show).
    Made 4 MiB at a time, so checking a whole 2 GiB region stays cheap."""

    CHUNK = 4 * MiB

    def __init__(self, size: int, seed: int = SEED) -> None:
        self.size, self.seed = size, seed
        n = checked(size)
        head, tail = n - n // 2, n // 2
        self.pieces = [(off, min(self.CHUNK, head - off))
                       for off in range(0, head, self.CHUNK)]
        self.pieces += [(size - tail + off, min(self.CHUNK, tail - off))
                        for off in range(0, tail, self.CHUNK)]

    def _bytes(self, start: int, n: int) -> bytes:
        return random.Random("%d/%d/%d" % (self.seed, self.size, start)).randbytes(n)

    def write(self, region: cp.Region) -> None:
        with region.view() as v:
            for start, n in self.pieces:
                v[start:start + n] = self._bytes(start, n)

    def check(self, region: cp.Region, what: str) -> None:
        with region.view() as v:
            for start, n in self.pieces:
                want, got = self._bytes(start, n), v[start:start + n]
                if got != want:
                    at = next(i for i in range(n) if got[i] != want[i])
                    pytest.fail("%s: data differs at offset %d: expected %#x, got %#x "
                                "(CLEARPAGES_TEST_SEED=%d)" % (what, start + at, want[at],
                                                              got[at], SEED))


def assert_alignment(address: int, alignment: str) -> None:
    assert address % LEVEL[alignment] == 0, hex(address)
    if NEXT[alignment]:
        assert address % NEXT[alignment] != 0, hex(address)


def big(size: int):
    """Cases of 1 GiB and more run everywhere memory allows (only the checked
    bytes are ever touched, unless CLEARPAGES_TEST_VERIFY_BYTES=0)."""
    need = (size if VERIFY == 0 else checked(size)) + 512 * MiB
    return pytest.mark.skipif(size >= GiB and mem_available() < need,
                              reason="needs %d MiB of free memory" % (need >> 20))


# (source alignment, destination alignment, size) as in mremap_test.c, with
# 5 MiB cases (an odd number of PMDs, the last one partial) added.
MATRIX = [
    ("pte", "pte", 8 * KiB),
    ("1m", "pte", 2 * MiB),
    ("1m", "1m", 2 * MiB),
    ("pmd", "pte", 4 * MiB),
    ("pmd", "1m", 4 * MiB),
    ("pmd", "pmd", 4 * MiB),
    ("1m", "1m", 5 * MiB),
    ("pmd", "pmd", 5 * MiB),
    ("pmd", "pud", 5 * MiB),
    ("pud", "pte", 2 * GiB),
    ("pud", "1m", 2 * GiB),
    ("pud", "pmd", 2 * GiB),
    ("pud", "pud", 2 * GiB),
    # the kernel's time-comparison cases
    ("pte", "pte", GiB),
    ("pmd", "pmd", GiB),
    ("pud", "pud", GiB),
]


def case_id(case):
    src, dst, size = case
    name = "%dGiB" % (size // GiB) if size >= GiB else (
        "%dMiB" % (size // MiB) if size >= MiB else "%dKiB" % (size // KiB))
    return "%s-%s-to-%s" % (name, src, dst)


@pytest.mark.parametrize("src,dst,size",
                         [pytest.param(*c, id=case_id(c), marks=big(c[2])) for c in MATRIX])
def test_move_matrix(src, dst, size):
    pattern = Pattern(size)
    with cp.Region(size) as r:
        r.move(src)
        assert_alignment(r.address, src)
        pattern.write(r)
        before = r.address
        after = r.move(dst)
        assert after == r.address != before
        assert_alignment(after, dst)
        assert r.size == size
        pattern.check(r, case_id((src, dst, size)))
        assert lib.cp_region_reserve_at(before, size) == 0, "old range still mapped"
        lib.cp_region_unmap(before, size)


def test_pte_moves_are_never_congruent_modulo_a_pmd():
    # else the kernel moves whole PMDs between shared boundaries and a
    # "PTE-aligned" move is no such thing
    with cp.Region(4 * MiB) as r:
        for _ in range(4):
            before = r.address
            r.move("pte")
            assert_alignment(r.address, "pte")
            assert r.address % (2 * MiB) != before % (2 * MiB)


@pytest.mark.parametrize("page_size", ["4k", "2m"])
def test_moves_keep_contents_across_every_alignment(page_size):
    with cp.Region(6 * MiB, page_size=page_size) as r:
        pattern = Pattern(r.size, SEED + 1)
        pattern.write(r)
        for alignment in ("pud", "pmd", "1m", "pte", "pmd", "pud"):
            if LEVEL[alignment] < r.page_size:
                with pytest.raises(ValueError, match="cannot be"):
                    r.move(alignment)
                continue
            r.move(alignment)
            assert_alignment(r.address, alignment)
            pattern.check(r, "after move to %s" % alignment)


def free_address(size: int) -> int:
    """An address where size bytes are free right now (reserved, then let go)."""
    with cp.Region(size + 8 * MiB) as probe:
        return probe.address + 4 * MiB


def test_move_to_an_exact_address():
    with cp.Region(64 * KiB) as r:
        pattern = Pattern(r.size)
        pattern.write(r)
        dst = free_address(r.size)
        r.move_to(dst)
        assert r.address == dst
        pattern.check(r, "move_to")


@pytest.mark.parametrize("offset", [-PTE, PTE, 32 * KiB])
def test_overlapping_move_is_refused(offset):
    with cp.Region(64 * KiB) as r:
        pattern = Pattern(r.size)
        pattern.write(r)
        address = r.address
        with pytest.raises(ValueError, match="overlaps"):
            r.move_to(address + offset)
        assert r.address == address
        pattern.check(r, "after a refused overlapping move")


@pytest.mark.parametrize("misalign", [KiB, 1, 2048])
def test_misaligned_destination_is_refused(misalign):
    # mremap_test's "Destination Address Misaligned (1KB-aligned)"
    with cp.Region(PTE) as r:
        dst = free_address(PTE) + misalign
        with pytest.raises(ValueError, match="multiple of the page size"):
            r.move_to(dst)


@pytest.mark.parametrize("address, kind", [(0, ValueError), (-4096, ValueError),
                                           (1 << 60, ValueError), ("0x1000", TypeError),
                                           (None, TypeError)])
def test_invalid_destinations_are_refused(address, kind):
    with cp.Region(PTE) as r, pytest.raises(kind, match="address"):
        r.move_to(address)


def test_occupied_destination_is_refused_and_left_alone():
    with cp.Region(64 * KiB) as r, cp.Region(64 * KiB) as other:
        other.view()[:5] = b"other"
        pattern = Pattern(r.size)
        pattern.write(r)
        address = r.address
        with pytest.raises(FileExistsError):
            r.move_to(other.address)
        dst = free_address(r.size)
        with Blocker(dst + 32 * KiB) as blocker:    # partly occupied
            with pytest.raises(FileExistsError):
                r.move_to(dst)
            assert blocker.still_there()
        assert r.address == address
        pattern.check(r, "after a refused move")
        assert bytes(other.view()[:5]) == b"other"


def test_unknown_alignment_is_refused():
    with cp.Region(PTE) as r:
        for bad, kind in (("pgd", ValueError), ("PMD ", ValueError), (4096, TypeError),
                          (None, TypeError)):
            with pytest.raises(kind, match="alignment"):
                r.move(bad)


def test_move_with_a_live_view_is_refused():
    with cp.Region(64 * KiB) as r:
        v = r.view()
        address = r.address
        with pytest.raises(BufferError):
            r.move("pmd")
        with pytest.raises(BufferError):
            r.move_to(free_address(r.size))
        assert r.address == address
        v[0] = 1
        del v


# ---- resize ----------------------------------------------------------------


class Blocker:
    """A page reserved right after a region, so it cannot grow in place."""

    def __init__(self, address: int) -> None:
        self.address = address
        # EEXIST: something is mapped there already, which blocks as well.
        self.owned = lib.cp_region_reserve_at(address, PTE) == 0

    def still_there(self) -> bool:
        return lib.cp_region_reserve_at(self.address, PTE) != 0

    def __enter__(self) -> Blocker:
        return self

    def __exit__(self, *exc) -> None:
        if self.owned:
            lib.cp_region_unmap(self.address, PTE)


def test_grow_keeps_contents_and_new_part_reads_zero():
    with cp.Region(3 * MiB) as r:
        pattern = Pattern(r.size)
        pattern.write(r)
        r.resize(10 * MiB)
        assert r.size == 10 * MiB
        pattern.check(r, "after growing")
        assert not any(r.view()[3 * MiB:])


@pytest.mark.parametrize("size,grown", [(8 * KiB, 64 * KiB), (5 * MiB, 12 * MiB),
                                        (4 * MiB, 2 * GiB)], ids=["8KiB", "5MiB", "4MiB-2GiB"])
def test_grow_that_must_move_keeps_the_address_congruent(size, grown):
    with cp.Region(size) as r:
        r.move("pmd")
        pattern = Pattern(size)
        pattern.write(r)
        old = r.address
        with Blocker(old + size) as blocker:
            r.resize(grown)
            assert r.address != old
            # Congruent modulo the largest entry that can move whole: a PUD
            # from 1 GiB up, below it a PMD (the kernel's own choice of place,
            # moved again where that is not congruent).
            modulus = GiB if grown >= GiB else 2 * MiB
            assert r.address % modulus == old % modulus
            assert r.size == grown
            pattern.check(r, "after a moving grow")
            with r.view() as v:
                assert not any(v[size:size + 64 * KiB]) and not any(v[-PTE:])
            assert blocker.still_there()


@not_under_sanitizers("its allocator maps its own memory into the range a shrink let go")
def test_shrink_keeps_the_head():
    with cp.Region(8 * MiB) as r:
        pattern = Pattern(2 * MiB)
        pattern.write(r)
        address = r.address
        r.resize(2 * MiB)
        assert r.size == 2 * MiB and r.address == address
        pattern.check(r, "after shrinking")
        assert not _mapped_after(address + 2 * MiB, 6 * MiB)


def _mapped_after(address: int, size: int) -> bool:
    return lib.cp_region_reserve_at(address, size) != 0 or \
        lib.cp_region_unmap(address, size) != 0


def test_resize_rounds_to_whole_pages():
    with cp.Region(PTE) as r:
        r.resize(PTE + 1)
        assert r.size == 2 * PTE
        r.resize(PTE)
        assert r.size == PTE
    with cp.Region(2 * MiB, page_size="2m") as r:
        r.resize(2 * MiB + 1)
        assert r.size == 4 * MiB


def test_resize_to_the_same_size_changes_nothing():
    with cp.Region(64 * KiB) as r:
        address = r.address
        r.resize(64 * KiB)
        assert (r.address, r.size) == (address, 64 * KiB)


@pytest.mark.skipif(_region._thp_mode() in (None, "never"), reason="THP disabled")
def test_2m_region_keeps_huge_pages_across_a_moving_grow():
    with cp.Region(8 * MiB, page_size="2m", populate=True) as r:
        huge_before = r.backing.anon_huge_pages
        assert huge_before > 0
        with Blocker(r.address + r.size):
            r.resize(16 * MiB)
        assert r.address % (2 * MiB) == 0
        b = r.backing
        assert b.thp_eligible and b.anon_huge_pages >= huge_before
        r.populate()
        assert r.backing.anon_huge_pages > huge_before


@pytest.mark.parametrize("bad, kind", [(0, ValueError), (-1, ValueError), (1 << 60, ValueError),
                                       ("1Q", ValueError), ("0K", ValueError),
                                       (2.0, TypeError), (None, TypeError), (True, TypeError)])
def test_bad_new_sizes_are_refused(bad, kind):
    with cp.Region(PTE) as r:
        with pytest.raises(kind, match="new_size"):
            r.resize(bad)
        assert r.size == PTE


def test_resize_with_a_live_view_is_refused_and_changes_nothing():
    np = pytest.importorskip("numpy")
    with cp.Region(64 * KiB) as r:
        a = np.frombuffer(r.view(), dtype=np.uint8)
        a[:3] = [1, 2, 3]
        address = r.address
        for size in (PTE, GiB):
            with pytest.raises(BufferError):
                r.resize(size)
        assert (r.address, r.size) == (address, 64 * KiB)
        assert list(a[:3]) == [1, 2, 3]
        del a
        r.resize(128 * KiB)


def test_failed_grow_leaves_the_region_as_it_was():
    # 64 TiB is address space the kernel will not commit: mremap fails
    # after the destination was reserved, and everything must unwind.
    with cp.Region(64 * KiB) as r:
        pattern = Pattern(r.size)
        pattern.write(r)
        address = r.address
        with Blocker(address + r.size):
            with pytest.raises((MemoryError, OSError)):
                r.resize(64 << 40)
        assert (r.address, r.size) == (address, 64 * KiB)
        pattern.check(r, "after a failed grow")
        r.resize(128 * KiB)
        pattern.check(r, "after the next grow")


def test_many_resizes_round_trip():
    rnd = random.Random(SEED)
    with cp.Region(PTE) as r:
        r.view()[:8] = b"12345678"
        for _ in range(40):
            old = r.size
            with r.view() as v:
                v[old - 1] = 0xFF           # the old end: kept when growing
            new = rnd.choice([PTE, 3 * PTE, MiB, 3 * MiB, 5 * MiB])
            with Blocker(r.address + old) if rnd.random() < 0.5 else contextlib.nullcontext():
                r.resize(new)
            with r.view() as v:
                assert bytes(v[:8]) == b"12345678", "seed %d" % SEED
                if new > old:
                    assert v[old - 1] == 0xFF and not any(v[old:])
