"""The shape of the package: a top that holds only user-facing modules and wings, every public module
saying what it exports, its public names pinned, no import circles, one home for each protocol detail,
a runtime that decides by error type, never by message text, and comments that keep the why (the
numbers live in bench/README.md)."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

import swarmlog

from ..conftest import REPO

PACKAGE = REPO / "platform" / "swarmlog"
SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((REPO / "connectors").rglob("*.py"))


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once for every test here (none changes it)."""
    return ast.parse(path.read_text())


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_tree(path)))

PUBLIC = {
    "swarmlog": [
        "Agent", "AgentFenced", "AppendFailed", "AppendIncomplete", "AsyncClient", "CheckpointUnreadable", "Client",
        "CodeVersionRefused", "FailedStepChanged", "PatchUnknown", "RunCannotGoOn", "RunContinuedElsewhere",
        "ConfigurationError", "Context", "ContinueRefused", "CopyFailed", "DatabasePermissionDenied", "Divergence",
        "DuplicateEventId",
        "EffectDiverged",
        "EffectFailed", "Event", "EventError", "EventFate", "EventLog", "EventNotFound", "ForkPointInsideStep",
        "GroupHasActiveMembers", "GroupNotAtStart", "GroupResetFailed", "HTTPRequestDiverged", "HashSeedMismatch",
        "HistoryHoles", "HistoryIncomplete", "InMemoryLog", "InputBeforeRun", "InputHandlerFailed", "InvalidCause",
        "InvalidEvent", "InvalidSetting",
        "InvalidToken", "KafkaHandshakeFailed", "KafkaOperationFailed", "KafkaSideError", "KafkaUnavailable",
        "MirrorBehind", "MirrorError", "MirrorMigrationFailed", "MirrorNotMigrated", "MissingDependency", "NoReply",
        "NoRunStarted", "NondeterminismError", "NotAnAgentOfTheRun", "OutsideStep", "PostgresUnavailable",
        "ReadFailed", "RegressionWorkerFailed", "ReplayResult", "ReplayWorkerFailed", "ReplyTimeout", "Retriable",
        "RoutingHeaderMismatch",
        "RunAlreadyRecorded", "RunError", "RunNotStarted", "ScheduleMismatch", "SchemaClash", "SchemaError",
        "SchemaNotFound", "Sent", "ServiceUnavailable", "Settings", "SignatureUnchecked", "SnapshotStale",
        "StateDiverged", "StateNotCapturable", "StateNotSerialisable", "StateUnavailable", "Swarm", "SwarmImportFailed",
        "SwarmReplayResult", "SwarmlogError", "TokenError", "TopicCreateFailed", "TopicExists", "TopicNotFound",
        "TopicNotSinglePartition", "TracingExporterMissing", "TrailingBytesInValue", "TransactionAborted",
        "UndecodableMessage",
        "UnknownEventType", "UnmodelledEffect", "UsageError", "on", "on_message", "on_timer", "replay",
        "replay_swarm", "run_agents", "start_run",
    ],
    "swarmlog.debug": [
        "AgentState", "Breakpoint", "CausalGraph", "Change", "Cursor", "Explained", "Forked", "Hit", "Ignored",
        "LogView", "LoggedEvent", "Replayed", "Session", "SnapshotInfo", "SnapshotStale", "SnapshotStore",
        "SnapshotsTaken", "StateDiff", "AgentStep", "Stepper", "Stop", "fork",
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
        "CredentialMissing", "HTTPRequestDiverged", "LLMClient", "LLMError", "LLMRequestFailed", "LLMResponseInvalid",
        "LLMUnavailable",
        "OpenAIChat", "RecordedHTTP", "Redaction", "RequestDiverged", "RetryPolicy", "SDKChat", "ScriptExhausted",
        "ScriptedLLM",
        "completion", "content", "llm_client",
    ],
    "swarmlog.log": [
        "AgentChannel", "Appender", "BATCH", "Delivered", "History", "InMemoryLog", "LogBackend", "MemoryMessage",
        "Message", "ReadPosition", "Reader",
    ],
    "swarmlog.runtime": [
        "AgentWorker", "Divergence", "LiveStates", "RunInfo", "SwarmReplayResult", "WorkerResult", "available_cpus",
        "code_version",
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
    "swarmlog.redaction": ["MASK", "REDACTED", "ClientConfig", "Redaction", "Scrubber", "SecretStr",
                           "is_secret_kafka_property", "redact_headers", "redact_url", "split_database_password"],
    "swarmlog.settings": ["DEFAULT_BOOTSTRAP_SERVERS", "DEFAULT_DATABASE_URL", "DEFAULT_TOPIC", "Settings"],
    "swarmlog.ui": ["MirrorReader", "Report", "RunRow", "StateUnavailable", "States", "create_app"],
    "swarmlog_connectors.mirror": ["Mirror", "MirroredEvent", "Run"],
    "swarmlog.replaying": ["CausalityViolation", "Divergence", "Fold", "Ledger", "LiveStates", "Reducer",
                           "ReplayResult", "SwarmReplayResult", "Undecodable", "check_causality", "replay",
                           "replay_swarm", "swarm_report"],
    "swarmlog.continuation": ["ChainLink", "Continued", "LinkCheck", "check_chain", "check_link", "continue_run"],
    "swarmlog.regression": ["STATUSES", "DivergenceGroup", "RegressionReport", "RunOutcome", "RunsChanged",
                            "parse_since", "regress", "runs_in_mirror", "shard", "topics_matching"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_each_face_exports_exactly_its_public_names_and_they_resolve(module):
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(PUBLIC[module])
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_the_readme_and_the_docs_name_only_importable_things():
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = page.read_text()
        for module, names in re.findall(r"^from (swarmlog[\w.]*) import ([\w, ]+)$", text, flags=re.M):
            mod = importlib.import_module(module)
            for name in names.split(","):
                found = hasattr(mod, name.strip()) or importlib.util.find_spec(f"{module}.{name.strip()}") is not None
                assert found, f"{page.name} imports {name.strip()} from {module}"


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
    for node in _nodes(path):
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


def test_no_module_outside_the_runtime_imports_a_private_runtime_module():
    # The engine the other wings drive (the debugger, the simulator, the token) is public inside the
    # package (runtime/engine.py with timers.py, verify.py and outcomes.py, history.py, checkpoint.py,
    # digests.py, driven.py, sink.py); the
    # runtime's underscored modules are its own machinery, free to change with it.
    runtime = PACKAGE / "runtime"
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    offenders = []
    for path in SOURCES:
        if path.is_relative_to(runtime):
            continue
        for target in _imports(path, modules) if path.is_relative_to(PACKAGE) else set():
            if target.startswith("swarmlog.runtime.") and target.rpartition(".")[2].startswith("_"):
                offenders.append(f"{path.relative_to(REPO)} imports {target}")
        for node in _nodes(path):  # the connectors, by absolute name
            if isinstance(node, ast.ImportFrom) and not node.level and node.module \
                    and re.match(r"swarmlog\.runtime\._", node.module):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {node.module}")
    assert sorted(set(offenders)) == []


def test_the_engines_public_modules_say_what_they_export():
    for name in ("engine", "timers", "verify", "outcomes", "history", "checkpoint", "digests", "driven", "sink"):
        mod = importlib.import_module(f"swarmlog.runtime.{name}")
        assert mod.__all__ and all(getattr(mod, n) is not None for n in mod.__all__), name


# --- one home for each protocol detail ----------------------------------------------------------

EVENT_TYPES = ("run.started", "agent.message", "timer.set", "timer.fired", "timer.cancelled", "effect.recorded",
               "llm.call", "handler.failed", "state.digest", "langgraph.checkpoint", "langgraph.writes",
               "langgraph.deleted")
HEADERS = ("sl.type", "sl.v", "sl.agent", "sl.to", "sl.step")
PROTOCOL = PACKAGE / "log" / "protocol.py"


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = _tree(path)
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
        for node in _nodes(path):
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
        for node in _nodes(path):
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
        for node in _nodes(path):
            if isinstance(node, ast.ExceptHandler) and node.type is not None and "Kafka" in ast.unparse(node.type):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_every_module_that_reports_at_run_time_logs_through_its_own_logger():
    printing = []
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("cli.py", "demo.py", "command.py", "check.py"):  # the command line decides the terminal
            continue
        tree = _tree(path)
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


# --- rooms that say what they hold ----------------------------------------------------------------

TOP_MODULES = {"__init__", "agent", "cli", "client", "context", "errors", "events", "redaction", "settings", "terminal",
               "_lazy"}
"""What a user touches at the top: the agent API (``agent``, ``context``, ``events``), work in and out of a
running swarm (``client``), the command line and what of the log reaches a terminal (``terminal``, every
wing's commands print through it), the errors, the settings and their secrets. Machinery lives in the wing it
belongs to; ``_lazy``, the mechanism of every wing's face, is the leaf they all import (in the package's
``__init__`` it would put the package itself in an import circle with every face). ``errors`` is a package:
the tree's branches are modules of their own behind it, and it is no wing (nothing of a mechanism lives there)."""
WINGS = {"aio", "continuation", "debug", "dev", "guard", "integrations", "kafka", "llm", "log", "observe", "regression",
         "replaying", "runtime", "schema", "testing", "token", "ui"}


def test_the_top_of_the_package_holds_only_user_facing_modules_and_wings():
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    modules = {p.stem for p in PACKAGE.glob("*.py")} | (packages & {"errors"})
    wings = packages - {"errors"}
    assert modules == TOP_MODULES, "machinery goes into the wing it belongs to (log/, runtime/, replaying/, ...)"
    assert wings == WINGS, "a new wing is an architectural decision: name it here"


SEAM_OWNED = {"debug/session.py", "debug/stepper.py", "runtime/runner.py"}
"""Public modules issue 25's first item (one recorded-history seam) is reworking: they say what they
export once it lands."""


def _is_public(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).with_suffix("").parts
    return not any(part.startswith("_") and part != "__init__" for part in parts)


def test_every_public_module_says_what_it_exports():
    missing, unresolved = [], []
    for root, top in ((PACKAGE, "swarmlog"), (REPO / "connectors" / "swarmlog_connectors", "swarmlog_connectors")):
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if not _is_public(path, root) or rel in SEAM_OWNED:
                continue
            tree = _tree(path)
            if not any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets)
                       for n in tree.body):
                missing.append(rel)
                continue
            name = ".".join([top, *Path(rel).with_suffix("").parts]).removesuffix(".__init__")
            module = importlib.import_module(name)
            unresolved += [f"{name}.{n}" for n in module.__all__ if not hasattr(module, n)]
    assert missing == [] and unresolved == []


# --- comments keep the why; the numbers live in bench/README.md -----------------------------------

FIGURE = re.compile(r"""
    \d[\d,]*(?:\.\d+)?\s?(?:µs|μs|us|ns)\b                       # a sub-millisecond timing
  | \d+\.\d+\s?ms\b                                           # a measured duration
  | (?:→|->)\s*\d[\d,.]*\s?(?:ms|s)\b                             # a before-and-after
  | ~\s?\d[\d,.]*\s?(?:ms|s|MB|GB|KB)\b                         # an approximate one
  | \b\d[\d,.]*\s?(?:MB|GB)\b                                   # a memory size
  | \bmedian\b[^.]*\d                                           # a median
  | (?<![\w.])\d+(?:\.\d+)?\s?(?:x|×)(?!\w)                     # a ratio
  | \b(?:twice|thrice|\w+\s+times)\s+(?:as\s+)?(?:fast|slow|faster|slower)\b
  | \d+(?:\.\d+)?\s?%                                           # a percentage
  | \ba\s+(?:third|fifth|quarter|tenth|sixth)\s+of\s+(?:its|the|a|what)\s+(?:\w+\s+)?(?:time|CPU|cost|second|start)
  | \b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b      # a commit id
  | \b(?:commit|measured\s+at|run\s+at)\s+[0-9a-f]{7,40}\b        # one of digits only
""", re.X)
"""A benchmark's figure or a commit id in the code's words. A configured value (``60 s``, ``64 KiB``)
describes the code and may stay; a measurement goes stale unseen."""

FIGURES_PENDING = {"debug/_fold.py"}
"""Issue 25's first item replaces the debugger's own fold; its figures go with it."""


def _words(path: Path) -> list[tuple[int, str]]:
    """The comments and the docstrings (modules', classes', functions', attributes') of ``path``."""
    source = path.read_text()
    words = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in _nodes(path):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
            documents = (i == 0 and isinstance(node, documented)) \
                or (i > 0 and isinstance(body[i - 1], (ast.Assign, ast.AnnAssign)))
            if documents and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                words += [(stmt.lineno + k, line) for k, line in enumerate(stmt.value.value.splitlines())]
    return words


def test_no_benchmark_figure_or_commit_id_sits_in_the_codes_comments():
    found = []
    for root in (PACKAGE, REPO / "connectors"):
        for path in sorted(root.rglob("*.py")):
            if path.relative_to(PACKAGE if root == PACKAGE else root).as_posix() in FIGURES_PENDING:
                continue
            found += [f"{path.relative_to(REPO)}:{line}: {m.group(0)!r}" for line, text in _words(path)
                      for m in FIGURE.finditer(text)]
    assert found == [], "keep the reason in the code, the figure in bench/README.md (by benchmark name)"


def test_the_figure_detector_finds_what_it_is_for():
    for text in ("costs about 3 µs", "median 54 ms at 100", "peak RSS ~560 MB", "4x faster per event",
                 "about five times faster", "a fifth of its time", "measured at 6945276", "700 → 1.85 s"):
        assert FIGURE.search(text), text
    for text in ("honoured up to 60 s", "64 KiB, ~200 messages", "reconnect.backoff.max.ms (10 s)", "0x1f",
                 "the worker's polls wait at most 0.1 s"):
        assert not FIGURE.search(text), text
