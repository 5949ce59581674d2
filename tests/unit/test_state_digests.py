"""The pieces of state digests in the record, as pure logic (the behaviour is in tests/contract/state.py)."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from swarmlog.log.hashing import _reference_encode, canonical, sha256_digest, short_sha256, state_hash
from swarmlog.log.protocol import STATE_DIGEST, parse_step, state_digest_id, stop_digest_id
from swarmlog.runtime import diff_states
from swarmlog.runtime.digests import DigestRecord, DigestRecorder, RecordedDigests, state_digest

from ..conftest import examples


def test_the_state_digest_is_the_state_hash_of_tokens_and_results():
    state = {"b": [1, 2], "a": {"x": None}, "s": {"q", "p"}}
    assert state_digest(state).hex() == state_hash(state)
    assert state_digest({"a": 1, "b": 2}) == state_digest({"b": 2, "a": 1})


def test_every_kth_step_and_the_transactions_last_step_are_digested():
    rec = DigestRecorder(agent="a", every=3)
    state = {"n": 0}
    for count, step in enumerate((10, 12, 15, 20, 22), start=1):
        state["n"] = count
        rec.stepped(step, state, count)
    record = rec.take(state, position=23, final=False)
    assert record.steps == [15, 22]  # the 3rd step, and the last one of the transaction
    assert record.digests == [state_digest({"n": 3}), state_digest({"n": 5})]
    assert record.state == state_digest({"n": 5}) and not rec.pending
    again = rec.take(state, position=30, final=True)
    assert again.steps == [] and again.state == state_digest({"n": 5}) and again.final


def test_recorded_digests_are_found_step_by_step_whatever_order_they_were_added_in():
    d = RecordedDigests()
    digest = {s: state_digest({"s": s}) for s in (3, 5, 9, 11)}
    d.add(DigestRecord(steps=[9, 11], digests=[digest[9], digest[11]], position=12, state=digest[11], final=False,
                       every=1))
    d.add(DigestRecord(steps=[3, 5], digests=[digest[3], digest[5]], position=6, state=digest[5], final=True,
                       every=1))
    assert len(d) == 4
    assert [d.at(s) for s in (1, 3, 4, 5, 9, 10, 11, 12)] == [None, digest[3], None, digest[5], digest[9], None,
                                                              digest[11], None]
    assert d.last is not None and d.last.position == 12  # the latest by position, not by arrival


def test_a_digest_record_is_a_valid_event_of_its_schema(registry):
    record = DigestRecord(steps=[4, 7], digests=[state_digest(1), state_digest(2)], position=8,
                          state=state_digest(2), final=True, every=1)
    assert registry.latest(STATE_DIGEST).validate_payload(record.payload()) == record.payload()


def test_digest_record_ids_are_no_step_outputs():
    assert parse_step(state_digest_id("a", 17)) is None and parse_step(stop_digest_id("a", 30)) is None
    assert state_digest_id("a", 17) != stop_digest_id("a", 17)


def test_a_state_diff_names_each_path_that_differs():
    live = {"phase": "waiting", "seen": [1, 2, 3], "meta": {"k": 1, "gone": True}}
    replayed = {"phase": "done", "seen": [1, 2, 4], "meta": {"k": 1, "new": 0}}
    assert diff_states(live, replayed) == [
        "state['meta']['gone']: live True, missing in the replay",
        "state['meta']['new']: missing live, replayed 0",
        "state['phase']: live 'waiting', replayed 'done'",
        "state['seen'][2]: live 3, replayed 4",
    ]
    assert diff_states({"x": [1]}, {"x": [1, 2]}) == ["state['x']: live [1], replayed [1, 2]"]
    assert len(diff_states({"x": list(range(100))}, {"x": list(range(1, 101))})) == 20


def test_a_state_that_is_not_json_is_refused_naming_the_agent_and_the_step():
    import pytest

    from swarmlog.errors import StateNotSerialisable

    rec = DigestRecorder(agent="a", every=1)
    with pytest.raises(StateNotSerialisable) as err:
        rec.stepped(42, {"when": object()}, 1)
    assert (err.value.agent, err.value.offset) == ("a", 42) and "self.state" in str(err.value)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(max_size=8)
    | st.frozensets(st.integers(), max_size=4),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=examples(300), deadline=None)
@given(_json_values)
def test_the_fast_canonical_encoder_writes_exactly_the_reference_encoding(value):
    assert canonical(value) == _reference_encode(value)


def test_a_circular_state_is_refused_as_the_reference_encoder_refuses_it():
    import pytest

    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError):
        canonical(loop)
    with pytest.raises(ValueError):
        _reference_encode(loop)


@given(st.binary(max_size=600) | st.sampled_from([b"", b"x" * 255, b"x" * 256, b"x" * 257, b"\x00" * 4096]))
def test_a_digest_is_sha256_whichever_implementation_hashes_it(data):
    # Short inputs go to CPython's own sha256, long ones to OpenSSL's: the same 32 bytes.
    assert sha256_digest(data) == hashlib.sha256(data).digest()
    assert short_sha256(data).digest() == hashlib.sha256(data).digest()
