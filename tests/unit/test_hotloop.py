"""The interpreter knobs a hot loop sets (swarmlog.log.hotloop): set inside the block, put back after it."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from swarmlog.log.hotloop import SWITCH_INTERVAL_S, YOUNG_THRESHOLD, fewer_collections, prompt_thread_switches


@pytest.fixture(autouse=True)
def _defaults():
    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(700, 10, 10)
    sys.setswitchinterval(0.005)
    yield
    gc.set_threshold(*thresholds)
    sys.setswitchinterval(interval)


def test_young_collections_are_spaced_inside_the_block_and_restored_after():
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_are_restored_when_the_block_raises():
    with pytest.raises(RuntimeError), fewer_collections(), prompt_thread_switches():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_nested_blocks_restore_only_when_the_outermost_leaves():
    with fewer_collections():
        with fewer_collections():
            pass
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the inner block left, the outer one runs
    assert gc.get_threshold()[0] == 700


def test_blocks_on_two_threads_restore_when_the_last_one_leaves():
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with fewer_collections():
            entered.set()
            release.wait(5)

    t = threading.Thread(target=other)
    t.start()
    assert entered.wait(5)
    with fewer_collections():
        pass
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the other thread's block still runs
    release.set()
    t.join(5)
    assert gc.get_threshold()[0] == 700


def test_a_collector_switched_off_or_already_spaced_further_is_left_alone():
    gc.set_threshold(0)
    with fewer_collections():
        assert gc.get_threshold()[0] == 0
    gc.set_threshold(10 * YOUNG_THRESHOLD, 5, 5)
    with fewer_collections():
        assert gc.get_threshold() == (10 * YOUNG_THRESHOLD, 5, 5)
    assert gc.get_threshold() == (10 * YOUNG_THRESHOLD, 5, 5)


def test_cycles_are_still_collected_inside_the_block():
    class Node:
        pass

    collected = []
    with fewer_collections():
        for _ in range(3 * YOUNG_THRESHOLD):
            a, b = Node(), Node()
            a.other, b.other = b, a  # a cycle only the collector frees
        collected.append(gc.get_count()[0])
    assert collected[0] < YOUNG_THRESHOLD + 1000  # young collections ran, at the spaced threshold


def test_thread_switches_are_prompter_inside_the_block_and_restored_after():
    with prompt_thread_switches():
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    assert sys.getswitchinterval() == pytest.approx(0.005)
    sys.setswitchinterval(SWITCH_INTERVAL_S / 2)  # a program asking for shorter keeps it
    with prompt_thread_switches():
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S / 2)
