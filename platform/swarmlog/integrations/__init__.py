"""swarmlog beside the agent frameworks people already use: each a thin layer over the framework's own
extension points, installed as an extra of its own and imported only when asked for.

* :mod:`swarmlog.integrations.langgraph` (``pip install 'swarmlog[langgraph]'``): LangGraph's
  checkpointer on the swarm's log and mirror, and a graph run inside a handler with its model and
  tool calls recorded.
"""

__all__ = []
