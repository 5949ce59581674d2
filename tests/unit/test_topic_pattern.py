"""Which topics a many-swarm sink mirrors: the pattern, as Kafka users write it (pure, no broker)."""

from __future__ import annotations

import pytest

from swarmlog.errors import UsageError
from swarmlog.kafka.discovery import TopicPattern
from swarmlog.log.protocol import is_side_topic, sink_group, snapshot_topic


def test_the_pattern_matches_whole_topic_names_as_kafka_connects_topics_regex():
    p = TopicPattern(pattern=r"swarm\..*")
    assert p.matches("swarm.a") and p.matches("swarm.team-7")
    assert not p.matches("xswarm.a") and not p.matches("swarm")  # whole name, not a search
    anchored = TopicPattern(pattern=r"^swarm\..*$")  # librdkafka's spelling means the same
    assert [anchored.matches(t) for t in ("swarm.a", "xswarm.a")] == [True, False]


def test_side_topics_and_kafkas_internal_topics_are_left_out_unless_asked():
    p = TopicPattern(pattern=".*")
    for side in (snapshot_topic("swarm.a"), "__consumer_offsets", "__transaction_state"):
        assert is_side_topic(side)
        assert not p.matches(side)
    assert TopicPattern(pattern=".*", include_side_topics=True).matches(snapshot_topic("swarm.a"))
    assert p.matches("swarm.a") and not is_side_topic("swarm.a")


def test_a_pattern_that_is_no_regex_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match=r"swarm\[") as info:
        TopicPattern(pattern="swarm[")
    assert "--topics-pattern" in str(info.value)


def test_the_sinks_consumer_groups_are_apart_from_agents_and_replays():
    assert sink_group("swarm.a") == "swarmlog-sink.swarm.a"
    assert sink_group() == "swarmlog-sink"
    assert not sink_group("t").startswith("swarmlog.t.")  # never an agent's group (swarmlog.<topic>.<agent>)


def test_the_sink_refuses_a_topic_and_a_pattern_together_before_reaching_any_service(capsys):
    from swarmlog import cli

    assert cli.main(["sink", "--topic", "swarm.a", "--topics-pattern", r"swarm\..*"]) == cli.EXIT_USAGE
    assert "--topic and --topics-pattern" in capsys.readouterr().err
    assert cli.main(["sink", "--include-side-topics"]) == cli.EXIT_USAGE
    assert cli.main(["sink", "--topics-pattern", "swarm["]) == cli.EXIT_USAGE
    assert "is not a regular expression" in capsys.readouterr().err
