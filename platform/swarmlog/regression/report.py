"""A regression replay's report: one verdict per run, runs grouped by where the code first departs.

Each run gets a :class:`RunOutcome`: ``clean`` (the candidate code does exactly what the run
recorded), ``diverged`` (with its first divergence), ``unreadable`` (the log holds messages that
are not readable events, or the topic is gone), ``history-incomplete`` (its first offsets were
deleted: the run cannot be rebuilt), ``failed`` (the replay could not finish: the message says
why) or ``skipped`` (another swarm's run, or a topic with no run).

**Grouping.** The same code change breaks many runs at different offsets, agents and event ids.
What they share is *where in the code* they depart: the handler that ran the first diverging
step (``Agent.handler``, found from the step's input event) and the kind of divergence (an output,
an effect, the state). That pair is the group key, so one change that breaks 40 runs is one line
with 40 runs under it, and two unrelated changes are two lines. What the log had at that step
varies from run to run (an output that now differs, or none where the code now writes one): the
group lists those details, with the run's own ids taken out, and how many runs each.

Three renderings: :meth:`RegressionReport.to_json` (one document), :meth:`RegressionReport.table`
(what a terminal shows) and :meth:`RegressionReport.junit` (JUnit XML: one ``testcase`` per run,
a divergence a ``failure``, a run that could not be checked an ``error``, another swarm's run
``skipped``), which CI systems display without any plugin.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CHECKED", "STATUSES", "RunsChanged", "DivergenceGroup", "RegressionReport", "RunOutcome", "TABLE_RUNS",
           "divergence_key",
           "general_detail"]

STATUSES = ("clean", "diverged", "unreadable", "history-incomplete", "failed", "skipped")
"""Every verdict a run can get, in the order the report lists them."""

TABLE_RUNS = 25
"""Runs the table lists under a group; the JSON and JUnit reports list every one."""

CHECKED = ("clean", "diverged")
"""The verdicts of a run whose replay finished: the others say it could not be checked."""

_RUN_OWN = re.compile(r"[^\s'\"]+@[^\s'\"]+|\b\d+\b")
"""Event ids (``agent@step#i``: the agent and offsets of one run) and bare numbers in a divergence's
detail: the run's own, not the code's, so they are left out of the group key."""


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot hold (a handler's payload may carry them): JUnit shows them as \\xNN."""


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def divergence_key(first: dict[str, Any] | None, handler: str | None) -> str:
    """The group key of a first divergence: the handler that ran the step, and the kind."""
    if first is None:
        return ""
    return f"{handler or '(no handler)'} · {first.get('kind', 'output')}"


def general_detail(first: dict[str, Any] | None) -> str:
    """A divergence's detail without the run's own ids and offsets."""
    return _RUN_OWN.sub("…", str((first or {}).get("detail", "")))


@dataclass(slots=True)
class RunOutcome:
    """What replaying one recorded run against the candidate code gave."""

    topic: str
    status: str
    """One of :data:`STATUSES`."""
    run_id: str | None = None
    swarm: str | None = None
    """The swarm that recorded the run (from its ``run.started``)."""
    code_version: str | None = None
    """The code version the run was recorded with."""
    events: int = 0
    end_offset: int | None = None
    seconds: float = 0.0
    first_divergence: dict[str, Any] | None = None
    """The first divergence (offset, agent, kind, detail, recorded, replayed), for ``diverged``."""
    handler: str | None = None
    """The handler that ran the first diverging step, ``Class.method``."""
    divergences: int = 0
    detail: str | None = None
    """Why the run could not be checked (``unreadable``, ``history-incomplete``, ``failed``, ``skipped``)."""

    @property
    def key(self) -> str:
        return divergence_key(self.first_divergence, self.handler)

    def where(self) -> str:
        """The first divergence in one line: offset, agent, kind."""
        d = self.first_divergence or {}
        return f"offset {d.get('offset')} (agent {d.get('agent')}, {d.get('kind')})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RunOutcome:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})


@dataclass(slots=True)
class DivergenceGroup:
    """Runs whose first divergence is at the same place in the code."""

    key: str
    handler: str | None
    kind: str
    runs: list[RunOutcome]

    def details(self) -> dict[str, int]:
        """What the divergence was, in general terms (:func:`general_detail`) -> how many runs, most first."""
        counts: dict[str, int] = {}
        for r in self.runs:
            d = general_detail(r.first_divergence)
            counts[d] = counts.get(d, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "handler": self.handler, "kind": self.kind, "details": self.details(),
                "runs": [r.topic for r in self.runs],
                "first_divergences": {r.topic: r.first_divergence for r in self.runs}}


@dataclass(slots=True)
class RegressionReport:
    """Every run's outcome, in the order the runs were listed; totals, groups and renderings."""

    swarm: str
    """The candidate swarm (``module:swarm``)."""
    outcomes: list[RunOutcome]
    seconds: float = 0.0
    """Wall time of the whole regression replay."""
    jobs: int = 1
    shard: tuple[int, int] | None = None
    """(index, count) when this report is one shard of an Indexed Job."""
    meta: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for o in self.outcomes if o.status == s) for s in STATUSES}

    @property
    def diverged(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == "diverged"]

    @property
    def unchecked(self) -> list[RunOutcome]:
        """Runs of the swarm that could not be checked: unreadable, history incomplete, failed."""
        return [o for o in self.outcomes if o.status not in (*CHECKED, "skipped")]

    @property
    def events(self) -> int:
        return sum(o.events for o in self.outcomes)

    def groups(self) -> list[DivergenceGroup]:
        """The diverged runs grouped by :func:`divergence_key`, the largest group first."""
        by_key: dict[str, list[RunOutcome]] = {}
        for o in self.diverged:
            by_key.setdefault(o.key, []).append(o)
        out = []
        for key, runs in by_key.items():
            first = runs[0].first_divergence or {}
            out.append(DivergenceGroup(key=key, handler=runs[0].handler, kind=str(first.get("kind", "output")),
                                       runs=runs))
        return sorted(out, key=lambda g: (-len(g.runs), g.key))

    def to_json(self) -> dict[str, Any]:
        return {"kind": "swarmlog.regression-report", "swarm": self.swarm, "runs": len(self.outcomes),
                "counts": self.counts(), "events": self.events, "seconds": round(self.seconds, 3), "jobs": self.jobs,
                "shard": list(self.shard) if self.shard else None, **self.meta,
                "groups": [g.to_json() for g in self.groups()],
                "outcomes": [o.to_json() for o in self.outcomes]}

    @classmethod
    def merged(cls, docs: Iterable[dict[str, Any]]) -> RegressionReport:
        """One report of many (the shards of an Indexed Job, each one's :meth:`to_json`)."""
        docs = list(docs)
        swarms = {d["swarm"] for d in docs}
        if len(swarms) > 1:
            from ..errors import UsageError

            raise UsageError(f"these reports replayed different swarms ({', '.join(sorted(swarms))}): merge the "
                             f"shards of one regression replay only")
        return cls(swarm=swarms.pop() if swarms else "", seconds=max((d["seconds"] for d in docs), default=0.0),
                   jobs=sum(d["jobs"] for d in docs),
                   outcomes=[RunOutcome.from_json(o) for d in docs for o in d["outcomes"]])

    # -- renderings ------------------------------------------------------------------------------

    def summary(self) -> str:
        c = self.counts()
        rate = f", {len(self.outcomes) / self.seconds * 60:.0f} runs/min" if self.seconds > 0 else ""
        parts = [f"{c[s]} {s}" for s in STATUSES if c[s] or s in CHECKED]
        return (f"{len(self.outcomes)} run(s) replayed against {self.swarm} in {self.seconds:.1f} s "
                f"({self.events} events{rate}): " + ", ".join(parts))

    def table(self) -> str:
        """The report as a terminal shows it: the groups of diverged runs, the runs not checked, a summary."""
        lines = []
        for g in self.groups():
            lines.append(f"DIVERGED  {len(g.runs)} run(s)  in {g.handler} ({g.kind})")
            for detail, n in g.details().items():
                lines.append(f"  {n:>4} × {detail}")
            for r in g.runs[:TABLE_RUNS]:
                lines.append(f"    {r.topic:<40} {r.where()}  run {r.run_id}")
            if len(g.runs) > TABLE_RUNS:
                lines.append(f"    … and {len(g.runs) - TABLE_RUNS} more (every one in --json, --report, --junit)")
        for o in self.unchecked:
            lines.append(f"{o.status.upper():<9} {o.topic}: {o.detail}")
        skipped = [o for o in self.outcomes if o.status == "skipped"]
        if skipped:
            lines.append(f"skipped   {len(skipped)} topic(s) not recorded by this swarm: "
                         + ", ".join(o.topic for o in skipped[:10]) + (" …" if len(skipped) > 10 else ""))
        lines.append(self.summary())
        if not self.diverged and not self.unchecked:
            lines.append("no run changed: the candidate code does exactly what every run recorded")
        return "\n".join(lines)

    def junit(self) -> str:
        """JUnit XML: a suite for the swarm, a testcase per run (``classname`` the swarm, ``name`` the topic)."""
        c = self.counts()
        suite = ET.Element("testsuite", name=f"swarmlog regress {self.swarm}", tests=str(len(self.outcomes)),
                           failures=str(c["diverged"]), errors=str(len(self.unchecked)), skipped=str(c["skipped"]),
                           time=f"{self.seconds:.3f}")
        for o in self.outcomes:
            case = ET.SubElement(suite, "testcase", classname=f"swarmlog.regress.{self.swarm}", name=o.topic,
                                 time=f"{o.seconds:.3f}")
            if o.status == "diverged":
                said = f"run {o.run_id} diverged first at {o.where()} in {o.handler}: " \
                       f"{(o.first_divergence or {}).get('detail')}"
                failure = ET.SubElement(case, "failure", type="diverged", message=_xml_text(said))
                failure.text = _xml_text(json.dumps(o.first_divergence, indent=2, default=str, sort_keys=True))
            elif o.status == "skipped":
                ET.SubElement(case, "skipped", message=_xml_text(o.detail or ""))
            elif o.status != "clean":
                ET.SubElement(case, "error", type=o.status, message=_xml_text(o.detail or o.status))
        root = ET.Element("testsuites", name="swarmlog regress", tests=suite.get("tests", "0"),
                          failures=suite.get("failures", "0"), errors=suite.get("errors", "0"),
                          time=suite.get("time", "0"))
        root.append(suite)
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


class RunsChanged(AssertionError):
    """Raised by the pytest plugin's ``regress`` fixture: the candidate code changes recorded runs (or some
    could not be checked). An ``AssertionError``, so pytest reports a failed test; ``report`` is the whole
    :class:`RegressionReport`, the message its table."""

    def __init__(self, report: RegressionReport) -> None:
        self.report = report
        self.diverged = [o.topic for o in report.diverged]
        self.unchecked = [o.topic for o in report.unchecked]
        super().__init__(f"{report.swarm} changes recorded runs:\n{report.table()}")
