"""Examples shipped with swarmlog, installed as ``swarmlog.examples``.

``swarmlog.examples.case_study``: the seed document's case study (``swarmlog demo`` plays it).
``swarmlog.examples.claims``: two workers claiming the same task, a race for the simulator
(``swarmlog.testing``) to find.
``swarmlog.examples.async_research``: a plain async program (AsyncOpenAI, two HTTP tools under
``asyncio.gather``, a writer call) run as an async agent with only its entry point wrapped.
``swarmlog.examples.agents_sdk_research``, ``pydantic_ai_research``, ``langgraph_research``: one research
program (a triage, a researcher with two tools of which one does HTTP, a writer that streams) written in each
framework's documented style and run as a swarm (docs/integrations/).
"""
