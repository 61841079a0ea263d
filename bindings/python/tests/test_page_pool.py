"""The page pool that restores and reads take their large arrays from (ckpt/_page_pool.py): a freed array's pages
serve the next array of its size or less, the parts of a split run join again, idle runs are unmapped after the keep
time, no two live arrays share a page, an array freed while the pool is busy never waits for it, a forked child
is not held by its parent's threads, and a restore into memory an earlier one used holds exactly the new
checkpoint's values."""

import gc
import mmap
import os
import threading
import time

import numpy as np
import pytest

import ckpt
from ckpt import _page_pool

MIB = 1 << 20


def address(array):
    return array.__array_interface__["data"][0]


def mapped(start, size):
    """Whether [start, start + size) lies in one of this process's mappings."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            low, high = (int(bound, 16) for bound in line.split()[0].split("-"))
            if low <= start and start + size <= high:
                return True
    return False


@pytest.fixture
def pool():
    # A long keep time: only the test that waits for it depends on the timer.
    return _page_pool.PagePool(keep_seconds=600)


def test_an_array_starts_on_a_page_boundary_has_its_size_and_may_be_written(pool):
    array = pool.array(3 * MIB + 5)
    assert address(array) % mmap.PAGESIZE == 0
    assert array.dtype == np.uint8 and array.shape == (3 * MIB + 5,)
    array[:] = 7
    assert int(array[-1]) == 7


def test_memory_the_kernel_cannot_map_is_a_no_memory_error_naming_the_size(pool):
    with pytest.raises(ckpt.NoMemoryError, match=f"mapping {1 << 60} bytes for a restored array failed"):
        pool.array(1 << 60)
    assert pool.kept_bytes == 0


def test_a_freed_arrays_pages_serve_the_next_array_of_its_size_or_less(pool):
    first = pool.array(4 * MIB)
    start = address(first)
    del first
    assert pool.kept_bytes == 4 * MIB
    smaller = pool.array(MIB)
    rest = pool.array(3 * MIB)
    assert address(smaller) == start and address(rest) == start + MIB
    assert pool.kept_bytes == 0
    larger = pool.array(5 * MIB)  # nothing kept is large enough
    assert address(larger) not in range(start, start + 4 * MIB)


def test_the_smallest_run_that_fits_is_taken(pool):
    big, small = pool.array(8 * MIB), pool.array(2 * MIB)
    small_start = address(small)
    del big, small
    assert address(pool.array(2 * MIB)) == small_start


def test_the_parts_of_a_split_run_join_again(pool):
    whole = pool.array(8 * MIB)
    start = address(whole)
    del whole
    halves = [pool.array(4 * MIB), pool.array(4 * MIB)]
    del halves
    assert pool.kept_bytes == 8 * MIB
    assert address(pool.array(8 * MIB)) == start


def test_live_arrays_never_share_a_page(pool):
    arrays = [pool.array(size * MIB + 100) for size in (1, 3, 2, 5)]
    del arrays[1], arrays[2]
    arrays += [pool.array(MIB), pool.array(2 * MIB), pool.array(4 * MIB)]
    spans = sorted((address(a), address(a) + a.nbytes) for a in arrays)
    for (_, end), (next_start, _) in zip(spans, spans[1:]):
        assert end <= next_start
    for index, array in enumerate(arrays):
        array[:] = index
    assert [int(a[0]) for a in arrays] == list(range(len(arrays)))
    assert [int(a[-1]) for a in arrays] == list(range(len(arrays)))


def test_runs_idle_past_the_keep_time_are_unmapped():
    pool = _page_pool.PagePool(keep_seconds=0.2)
    array = pool.array(2 * MIB)
    start = address(array)
    del array
    assert pool.kept_bytes == 2 * MIB and mapped(start, 2 * MIB)
    deadline = time.monotonic() + 10
    while pool.kept_bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.kept_bytes == 0
    assert not mapped(start, 2 * MIB)


def test_an_array_freed_while_another_thread_holds_the_pool_neither_waits_nor_is_lost(pool):
    array = pool.array(2 * MIB)
    start = address(array)
    holder = [array]
    del array
    pool._lock.acquire()  # as a thread taking an array does; the freeing thread must not wait for it
    freeing = threading.Thread(target=holder.clear)
    freeing.start()
    freeing.join(timeout=10)
    held_meanwhile = freeing.is_alive()
    pool._unlock()
    assert not held_meanwhile
    assert pool.kept_bytes == 2 * MIB
    assert address(pool.array(2 * MIB)) == start


def test_a_numpy_restore_reuses_the_arrays_of_the_last_one_and_holds_only_the_new_values(tmp_path):
    first = {"w": np.full((1024, 512), 1.5, np.float32), "b": np.arange(512 * 1024, dtype=np.int32)}
    second = {"w": np.full((1024, 512), -2.0, np.float32), "b": np.arange(512 * 1024, dtype=np.int32)[::-1].copy()}
    ckpt.save(tmp_path / "first", first).wait()
    ckpt.save(tmp_path / "second", second).wait()
    gc.disable()  # the arrays must go back when the caller drops them, not when a cycle collection finds them
    try:
        restored = ckpt.restore(tmp_path / "first", first)
        used = {address(restored["w"]), address(restored["b"])}
        del restored
        again = ckpt.restore(tmp_path / "second", second)
        assert {address(again["w"]), address(again["b"])} == used
    finally:
        gc.enable()
    for key, value in second.items():
        assert np.array_equal(again[key], value), key


# The timer thread of an earlier test may be alive: the fork with threads running is what this test is about.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_child_forked_while_a_thread_held_the_pool_can_take_arrays():
    kept = _page_pool.POOL.array(2 * MIB)
    del kept
    _page_pool.POOL._lock.acquire()  # as another thread taking an array at the moment of the fork
    try:
        child = os.fork()
        if child == 0:
            try:
                array = _page_pool.POOL.array(2 * MIB)
                array[:] = 1
                os._exit(0 if int(array.sum()) == 2 * MIB else 1)
            finally:
                os._exit(2)
    finally:
        _page_pool.POOL._unlock()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        os.waitpid(child, 0)
        pytest.fail("the forked child waited for the pool's lock")
    assert os.waitstatus_to_exitcode(status) == 0
