"""The fold behind LangGraph's checkpointer on the log (swarmlog.integrations.langgraph._fold): the log's order
decides what a deletion covers, which record of a checkpoint counts, which writes are kept and where a
channel's value comes from. (The checkpointer against Kafka and Postgres: tests/integration.)"""

from __future__ import annotations

import json

# The fold is imported by the tests: its package imports LangGraph, which every xdist worker would pay for
# at collection, and only one runs these tests.


def _cp(seq, cid, *, thread="t", ns="", parent=None, versions=None, blobs=(), run_id=None):
    from swarmlog.integrations.langgraph._fold import CheckpointRow
    meta = {"source": "loop", "step": seq} | ({"run_id": run_id} if run_id else {})
    payload = {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid, "parent_checkpoint_id": parent,
               "checkpoint_json": json.dumps({"id": cid, "channel_versions": versions or {}}),
               "metadata_json": json.dumps(meta)}
    return CheckpointRow.from_payload(seq, payload, blobs)


def _ids(fold):
    return [r.checkpoint_id for r in fold.visible()]


def test_a_deletion_covers_only_what_was_written_before_it():
    from swarmlog.integrations.langgraph._fold import ThreadFold
    fold = ThreadFold()
    fold.checkpoint(_cp(1, "a"))
    fold.checkpoint(_cp(2, "b", thread="other"))
    fold.deleted(seq=3, thread_ids=["t"], run_ids=[], keep_latest=False)
    fold.checkpoint(_cp(4, "c", parent=None))
    assert _ids(fold) == ["c", "b"]


def test_prune_keeps_the_latest_checkpoint_of_each_namespace_as_of_its_offset():
    from swarmlog.integrations.langgraph._fold import ThreadFold
    fold = ThreadFold()
    for seq, cid, ns in ((1, "a", ""), (2, "b", ""), (3, "x", "child:1"), (4, "y", "child:1")):
        fold.checkpoint(_cp(seq, cid, ns=ns))
    fold.deleted(seq=5, thread_ids=["t"], run_ids=[], keep_latest=True)
    assert _ids(fold) == ["y", "b"]


def test_delete_for_runs_takes_only_the_named_runs_checkpoints_and_their_writes():
    from swarmlog.integrations.langgraph._fold import ThreadFold, WriteRow
    fold = ThreadFold()
    fold.checkpoint(_cp(1, "a", run_id="r1"))
    fold.writes(("t", "", "a"), [WriteRow(2, "task", "", 0, "ch", "json", b"1")])
    fold.checkpoint(_cp(3, "b", parent="a", run_id="r2"))
    fold.deleted(seq=4, thread_ids=[], run_ids=["r1"], keep_latest=False)
    assert _ids(fold) == ["b"]
    assert fold.pending_writes(("t", "", "a")) == []


def test_a_regular_write_keeps_its_first_record_and_a_special_one_its_last():
    from swarmlog.integrations.langgraph._fold import ThreadFold, WriteRow
    fold = ThreadFold()
    key = ("t", "", "a")
    fold.checkpoint(_cp(1, "a"))
    fold.writes(key, [WriteRow(2, "task", "", 0, "ch", "json", b"first"), WriteRow(2, "task", "", -1, "__error__",
                                                                                    "json", b"old")])
    fold.writes(key, [WriteRow(3, "task", "", 0, "ch", "json", b"again"), WriteRow(3, "task", "", -1, "__error__",
                                                                                    "json", b"new")])
    assert [(w.idx, w.data) for w in fold.pending_writes(key)] == [(-1, b"new"), (0, b"first")]


def test_a_channel_value_comes_from_its_own_branch_when_two_branches_reach_the_same_version():
    from swarmlog.integrations.langgraph._fold import ThreadFold
    fold = ThreadFold()
    fold.checkpoint(_cp(1, "a", versions={"x": 1}, blobs=[("x", "1")]))
    fold.checkpoint(_cp(2, "b", parent="a", versions={"x": 2}, blobs=[("x", "2")]))       # branch one: x@2
    fold.checkpoint(_cp(3, "c", parent="a", versions={"x": 2}, blobs=[("x", "2")]))       # branch two: x@2 too
    fold.checkpoint(_cp(4, "d", parent="b", versions={"x": 2, "y": 1}, blobs=[("y", "1")]))
    rows = {r.checkpoint_id: r for r in fold.visible()}
    assert fold.blob_source(rows["d"], "x", "2") == 2  # d follows b, not c, though c wrote x@2 later
    assert fold.blob_source(rows["c"], "x", "2") == 3
    assert fold.blob_source(rows["d"], "x", "1") == 1


def test_a_deleted_thread_never_lends_its_old_blobs_to_a_new_one_of_the_same_id():
    from swarmlog.integrations.langgraph._fold import ThreadFold
    fold = ThreadFold()
    fold.checkpoint(_cp(1, "a", versions={"x": 1}, blobs=[("x", "1")]))
    fold.deleted(seq=2, thread_ids=["t"], run_ids=[], keep_latest=False)
    fresh = _cp(3, "b", versions={"x": 1})  # claims x@1 but carries no blob of it
    fold.checkpoint(fresh)
    assert fold.blob_source(fresh, "x", "1") is None
