"""Examples shipped with swarmlog, installed as ``swarmlog.examples``.

``swarmlog.examples.case_study``: the seed document's case study (``swarmlog demo`` plays it).
``swarmlog.examples.claims``: two workers claiming the same task, a race for the simulator
(``swarmlog.testing``) to find.
"""
