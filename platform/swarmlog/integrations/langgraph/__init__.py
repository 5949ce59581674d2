"""LangGraph on swarmlog (``pip install 'swarmlog[langgraph]'``; docs/integrations/langgraph.md).

* :class:`SwarmlogSaver`: a LangGraph checkpointer whose checkpoints and writes are events of the
  swarm's Kafka topic, read back from the Postgres mirror (read-your-writes). It passes LangGraph's
  own conformance suite, ``langgraph-checkpoint-conformance``, on the real Kafka and Postgres.
"""

from ._saver import SwarmlogSaver

__all__ = ["SwarmlogSaver"]
