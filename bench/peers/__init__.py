"""``make bench-peers``: the tools a user would pick instead, measured beside swarmlog in one run.

LangGraph with its Postgres checkpointer on the ring and single-chain shapes
(``langgraph_ring``), Kafka Connect with Debezium's JDBC sink connector on the sink
benchmark's events (``kafka_connect``). They are heavy (a JVM, a 40k-step LangGraph run
per durability mode), hence a target of their own. Results: bench/results-peers.json and
bench/results-peers.md; how each is measured: bench/README.md.
"""
