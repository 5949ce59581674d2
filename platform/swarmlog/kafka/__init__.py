"""The Kafka side of swarmlog: the backend production runs on, topics, groups, readers.

Everything here speaks librdkafka (through confluent-kafka); its exceptions are
translated into :mod:`swarmlog.errors` at one seam, :mod:`swarmlog.kafka.errors`.
"""

from .backend import KafkaBackend
from .groups import committed_offset, group_members, reset_group
from .reader import LogReader, high_watermark, watermarks
from .topic import TOPIC_CONFIG, TopicInfo, create_topic, describe_topic, require_single_partition, topic_config

__all__ = [
    "TOPIC_CONFIG",
    "KafkaBackend",
    "LogReader",
    "TopicInfo",
    "committed_offset",
    "create_topic",
    "describe_topic",
    "group_members",
    "high_watermark",
    "require_single_partition",
    "reset_group",
    "topic_config",
    "watermarks",
]
