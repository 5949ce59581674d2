"""Configuration and the environment: a setting, a command's arguments, a simulation's models or a swarm's
module that do not fit (:class:`ConfigurationError`: the CLI's exit 2, fix the command or the settings), and a
program swarmlog needs that is not installed (:class:`MissingDependency`)."""

from __future__ import annotations

from collections.abc import Sequence

from ._base import SwarmlogError

__all__ = ["ConfigurationError", "UsageError", "InvalidSetting", "TracingExporterMissing", "UnmodelledEffect",
           "ScheduleMismatch", "NotAnAgentOfTheRun", "StateUnavailable", "SwarmImportFailed", "MissingDependency"]


class ConfigurationError(SwarmlogError):
    """A setting is missing or wrong."""


class UsageError(ConfigurationError):
    """A command was called wrongly (arguments that do not fit together)."""


class InvalidSetting(ConfigurationError):
    """A setting (an environment variable, or a librdkafka property) has a value swarmlog cannot use."""

    def __init__(self, *, variable: str, value: str | None, problem: str, hint: str = "") -> None:
        self.variable = variable
        self.value = value
        """What it was set to; None when it may hold a secret (a password in a URL)."""
        self.problem = problem
        self.hint = hint
        shown = f"={value!r}" if value is not None else ""
        super().__init__(f"{variable}{shown}: {problem}" + (f"; expected {hint}" if hint else ""))


class TracingExporterMissing(ConfigurationError):
    """``OTEL_TRACES_EXPORTER`` (or an OTLP endpoint) asks for an exporter whose package is not installed."""

    def __init__(self, *, exporter: str, package: str) -> None:
        self.exporter = exporter
        self.package = package
        super().__init__(f"tracing is asked to export through {exporter!r}, but {package} is not installed: "
                         f"pip install 'swarmlog[otel]' (OTLP over HTTP and the console), or install {package}; "
                         f"or unset OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT to run without traces")


class UnmodelledEffect(ConfigurationError):
    """A simulated step called an effect or the LLM that the simulation has no answer for.

    The simulator never calls the world: every ``ctx.effect`` and ``ctx.llm`` is answered
    from the simulation's models, so that a run is a function of its schedule.
    """

    def __init__(self, *, agent: str, offset: int, kind: str, name: str) -> None:
        self.agent = agent
        self.offset = offset
        self.kind = kind
        self.name = name
        if kind == "HTTP exchange":
            what = ("ctx.http() is not simulated (a raw HTTP exchange has no model to answer it): in a swarm "
                    "you simulate, make the call through ctx.llm (Swarm(llm=...)) or ctx.effect, which the "
                    "Simulator models with llm=... / effects={...}")
        else:
            how = (f"effects={{{name!r}: ...}}" if kind == "effect" else "llm=...")
            what = (f"the simulation has no model for {kind} {name!r}. Give the Simulator {how}: a value, a "
                    f"function of the call's arguments, Fail(exception) or one_of(...) to let the schedule "
                    f"choose")
        super().__init__(f"agent {agent!r}, step at offset {offset}: {what}; the simulator never calls the "
                         f"world itself")


class ScheduleMismatch(ConfigurationError):
    """A recorded schedule does not fit the swarm it is run on (other code, another swarm)."""

    def __init__(self, *, decision: int, choice: int, options: int) -> None:
        self.decision = decision
        self.choice = choice
        self.options = options
        super().__init__(f"the schedule takes option {choice} at decision {decision}, where the swarm has only "
                         f"{options} option(s): it was recorded on other code or another swarm. Explore again "
                         f"with this code to get a schedule for it")


class NotAnAgentOfTheRun(UsageError):
    """An input names an agent the run does not have, or comes from one of the run's own agents."""

    def __init__(self, *, topic: str, run_id: str, name: str, agents: Sequence[str], role: str) -> None:
        self.topic = topic
        self.run_id = run_id
        self.name = name
        self.agents = list(agents)
        self.role = role
        """``recipient``: no agent of the run is called ``name`` (the input would be read by nobody);
        ``sender``: ``name`` is an agent of the run (the input would pass for that agent's own record)."""
        listed = ", ".join(self.agents) or "none"
        if role == "recipient":
            problem = f"run {run_id!r} of topic {topic!r} has no agent {name!r}: nobody would read this input"
        else:
            problem = (f"{name!r} is an agent of run {run_id!r} of topic {topic!r}: input comes from outside the "
                       f"swarm, so write it as another name (Client(sender=...), --agent)")
        super().__init__(f"{problem} (the run's agents: {listed})")


class StateUnavailable(ConfigurationError):
    """The console cannot compute this state (no code for the run's swarm, or the fold failed)."""


class SwarmImportFailed(ConfigurationError):
    """The module a ``module:swarm`` names raised while it was imported: the swarm's own code is at fault.

    ``where`` is the line it raised at, in the swarm's code where the traceback passes through it
    (``path:line``; "" when not known); the exception itself is the ``__cause__``, whose traceback
    the command line shows with ``-v``."""

    def __init__(self, *, spec: str, module: str, error: str, where: str) -> None:
        self.spec = spec
        self.module = module
        self.error = error
        """The exception, as ``Type: message``."""
        self.where = where
        at = f" at {where}" if where else ""
        super().__init__(f"the swarm's module {module!r} ({spec}) raised while it was imported: {error}{at}. "
                         f"Fix the module (-v shows the traceback)")


class MissingDependency(SwarmlogError):
    """A program swarmlog needs is not installed (Java, Maven, PostgreSQL)."""

    def __init__(self, *, program: str, install_hint: str) -> None:
        self.program = program
        self.install_hint = install_hint
        super().__init__(f"{program} is required but was not found. {install_hint}")
