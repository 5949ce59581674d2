"""The `simulate` fixture, as a user's test suite gets it: from swarmlog's pytest11 entry point."""

from __future__ import annotations

pytest_plugins = ["pytester"]

SUITE = '''
from swarmlog.examples import case_study

def test_the_buggy_review_always_finishes(simulate):
    simulate(case_study.buggy, effects=case_study.MODELS, end_state=case_study.finished)

def test_the_fixed_review_always_finishes(simulate):
    simulate(case_study.fixed, effects=case_study.MODELS, end_state=case_study.finished, crashes=1)
'''


def test_a_property_test_of_a_swarm_is_one_call_and_fails_with_the_smallest_schedule(pytester):
    pytester.makepyfile(test_review=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--swarmlog-examples", "40")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    # The failure: the shrunk schedule, step by step, and how to make the same run again.
    assert "DEADLOCK" in out and "its timeout 'deadline' fires" in out
    assert "the same run again: Simulator(...).run(Schedule(choices=(0, 1)))" in out
    # The summary: what each exploration covered (the option capped the fixed one at 40).
    assert "swarmlog simulation" in out
    assert "test_the_fixed_review_always_finishes: Hypothesis explored 40 schedules (40 distinct)" in out
    assert "none failed" in out
