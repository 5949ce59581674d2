"""The shape of the package: its public names, no import circles, one home for each protocol detail,
and a runtime that decides by error type, never by message text."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import swarmlog

from ..conftest import REPO

PACKAGE = REPO / "platform" / "swarmlog"
SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((REPO / "connectors").rglob("*.py"))

PUBLIC = {
    "swarmlog": [
        "Agent", "AgentFenced", "AppendFailed", "AppendIncomplete", "CheckpointUnreadable", "ConfigurationError",
        "Context", "CopyFailed", "DatabasePermissionDenied", "Divergence", "EffectDiverged", "EffectFailed", "Event",
        "EventError", "EventFate", "EventLog", "EventNotFound", "ForkPointInsideStep", "GroupHasActiveMembers",
        "GroupNotAtStart", "GroupResetFailed", "HTTPRequestDiverged", "HashSeedMismatch", "HistoryIncomplete",
        "InMemoryLog", "InvalidEvent", "InvalidSetting", "InvalidToken", "KafkaHandshakeFailed",
        "KafkaOperationFailed", "KafkaSideError", "KafkaUnavailable", "MirrorBehind", "MirrorError",
        "MirrorMigrationFailed", "MirrorNotMigrated", "MissingDependency", "NoRunStarted", "NondeterminismError",
        "OutsideStep", "PostgresUnavailable", "ReadFailed", "ReplayResult", "ReplayWorkerFailed", "Retriable",
        "RoutingHeaderMismatch", "RunAlreadyRecorded", "RunError", "RunNotStarted", "ScheduleMismatch", "SchemaClash",
        "SchemaError", "SchemaNotFound", "ServiceUnavailable", "Settings", "SignatureUnchecked", "SnapshotStale",
        "StateDiverged", "StateNotCapturable", "StateNotSerialisable", "StateUnavailable", "Swarm",
        "SwarmReplayResult", "SwarmlogError", "TokenError", "TopicCreateFailed", "TopicExists", "TopicNotFound",
        "TopicNotSinglePartition", "TracingExporterMissing", "TransactionAborted", "UndecodableMessage",
        "UnknownEventType", "UnmodelledEffect", "UsageError", "on", "on_message", "on_timer", "replay",
        "replay_swarm", "run_agents", "start_run",
    ],
    "swarmlog.debug": [
        "AgentState", "Breakpoint", "CausalGraph", "Change", "Cursor", "Explained", "Forked", "Hit", "Ignored",
        "LogView", "LoggedEvent", "Replayed", "Session", "SnapshotInfo", "SnapshotStale", "SnapshotStore",
        "SnapshotsTaken", "StateDiff", "Step", "Stepper", "Stop", "fork",
    ],
    "swarmlog.debug.timeline": ["ROW_KINDS", "Row", "Timeline", "build_timeline", "from_graph", "render_html",
                                "render_text", "write_html"],
    "swarmlog.integrations.langgraph": ["SwarmlogSaver"],
    "swarmlog.kafka": [
        "KafkaBackend", "LogReader", "TOPIC_CONFIG", "TopicInfo", "committed_offset", "create_topic",
        "describe_topic", "group_members", "high_watermark", "require_single_partition", "reset_group",
        "topic_config", "watermarks",
    ],
    "swarmlog.llm": [
        "HTTPRequestDiverged", "LLMClient", "LLMError", "LLMRequestFailed", "LLMResponseInvalid", "LLMUnavailable",
        "OpenAIChat", "RecordedHTTP", "Redaction", "RetryPolicy", "SDKChat", "ScriptExhausted", "ScriptedLLM",
        "completion", "content", "llm_client",
    ],
    "swarmlog.log": [
        "AgentChannel", "Appender", "BATCH", "Delivered", "History", "InMemoryLog", "LogBackend", "MemoryMessage",
        "Message", "ReadPosition", "Reader",
    ],
    "swarmlog.runtime": [
        "AgentWorker", "Divergence", "LiveStates", "RunInfo", "SwarmReplayResult", "WorkerResult", "code_version",
        "diff_states", "find_run", "load_swarm", "pin_interpreter", "replay_swarm_log", "result_json", "run_agents",
        "start_run",
        "wait_for_run",
    ],
    "swarmlog.schema": ["Decoder", "Encoder", "EventSchema", "SchemaRegistry"],
    "swarmlog.observe": ["Family", "Health", "LatencyHistogram", "Metrics", "ObservabilityServer", "serve",
                         "serve_process"],
    "swarmlog.testing": [
        "Exploration", "Exported", "Fail", "Schedule", "ScriptedLLM", "SimRun", "SimulationFailed", "Simulator",
        "Step", "StubRequest", "StubServer", "Violation", "anthropic_message", "export", "no_handler_failed",
        "no_message_ignored", "one_of", "schedules", "tool_call_reply",
    ],
    "swarmlog.token": [
        "AnyToken", "Checkpoint", "DEFAULT_EVERY", "FirstDifference", "InvalidToken", "ReplayToken", "ReplayTokenV2",
        "SignatureUnchecked", "TOKEN_VERSION", "TokenCheck", "check_signature", "create_token", "load_token",
        "mismatches", "parse_token", "signature_status", "token_from", "verify_token",
    ],
    "swarmlog.replaying": ["CausalityViolation", "Divergence", "Fold", "Ledger", "LiveStates", "Reducer",
                           "ReplayResult", "SwarmReplayResult", "Undecodable", "check_causality", "replay",
                           "replay_swarm", "swarm_report"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_each_face_exports_exactly_its_public_names_and_they_resolve(module):
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(PUBLIC[module])
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_the_readme_names_only_importable_things():
    readme = (REPO / "README.md").read_text()
    for module, names in re.findall(r"^from (swarmlog[\w.]*) import ([\w, ]+)$", readme, flags=re.M):
        mod = importlib.import_module(module)
        for name in names.split(","):
            assert hasattr(mod, name.strip()), f"README imports {name.strip()} from {module}"


# --- import circles ------------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    name = ".".join(rel.parts)
    return name.removesuffix(".__init__")


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every swarmlog module ``path`` imports, function-level imports included."""
    name = _module_name(path)
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            subs = [f"{prefix}.{a.name}" for a in node.names]
            named = [s for s in subs if s in modules]
            targets = named + ([prefix] if len(named) < len(subs) else [])
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_the_package_has_no_import_circle():
    # A C extension's module is its stub (swarmlog/guard/_native.pyi): importing it imports no package.
    paths = {_module_name(p): p for p in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyi")]}
    graph = {m: _imports(p, set(paths)) for m, p in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


# --- one home for each protocol detail ----------------------------------------------------------

EVENT_TYPES = ("run.started", "agent.message", "timer.set", "timer.fired", "timer.cancelled", "effect.recorded",
               "llm.call", "handler.failed", "state.digest", "langgraph.checkpoint", "langgraph.writes",
               "langgraph.deleted")
HEADERS = ("sl.type", "sl.v", "sl.agent", "sl.to", "sl.step")
PROTOCOL = PACKAGE / "log" / "protocol.py"


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_event_type_names_and_header_names_are_written_only_in_the_protocol_module():
    strays = []
    for path in SOURCES:
        if path == PROTOCOL:
            continue
        for line, value in _string_constants(path):
            if value in EVENT_TYPES or value in HEADERS:
                strays.append(f"{path.relative_to(REPO)}:{line}: {value!r}")
    assert strays == [], "use the constants of swarmlog.log.protocol"


def test_the_event_id_grammar_is_spelled_only_in_the_protocol_module():
    # "<agent>@<step>#<i>" built or parsed anywhere else: an f-string with "@" then "#",
    # or the "@timer" mark of a wall-clock firing, the "@state"/"@stop" marks of a state digest record.
    strays = []
    for path in SOURCES:
        if path == PROTOCOL:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                if re.search(r"\{\}@\{\}#", text):
                    strays.append(f"{path.relative_to(REPO)}:{node.lineno}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and any(mark in node.value for mark in ("@timer", "@state", "@stop")):
                strays.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert strays == [], "use swarmlog.log.protocol.output_id / wall_timer_id / state_digest_id / parse_step"


# --- decisions by type, never by text ------------------------------------------------------------

_TEXT_ATTRS = {"detail", "reason", "args", "message", "description"}


_ERROR_NAMES = {"exc", "err", "error", "e", "failure"}


def _is_error_text(node: ast.expr) -> bool:
    """``exc.detail``, ``err.args``, ``str(exc)``: the text of an error."""
    if isinstance(node, ast.Attribute) and node.attr in _TEXT_ATTRS:
        return isinstance(node.value, ast.Name) and node.value.id in _ERROR_NAMES
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr")
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in _ERROR_NAMES)


def test_no_code_decides_by_an_error_messages_text():
    offenders = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                if any(_is_error_text(n) for n in [node.left, *node.comparators]):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_kafka_exceptions_are_handled_only_in_the_kafka_package():
    kafka_pkg = PACKAGE / "kafka"
    dev_pkg = PACKAGE / "dev"  # the dev cluster's health probe asks a broker that may still be starting
    offenders = []
    for path in SOURCES:
        if path.is_relative_to(kafka_pkg) or path.is_relative_to(dev_pkg):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler) and node.type is not None and "Kafka" in ast.unparse(node.type):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_every_module_that_reports_at_run_time_logs_through_its_own_logger():
    printing = []
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("cli.py", "demo.py", "command.py", "check.py"):  # the command line decides the terminal
            continue
        tree = ast.parse(path.read_text())
        # The dev cluster's default progress reporter is the `swarmlog dev` command's terminal output.
        allowed = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "print_progress"
                   for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print" \
                    and id(node) not in allowed:
                printing.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert printing == [], "log with logging.getLogger(__name__); the CLI decides what reaches the terminal"
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if "logger." in text:
            assert "logger = logging.getLogger(__name__)" in text, path


def test_version_of_the_package_facing_users_is_importable():
    assert swarmlog.Swarm and swarmlog.replay_swarm
