"""The error tree can be caught: intermediate classes for the Kafka side, events and schemas, the mirror, runs,
tokens and LLM calls; a retriable axis; each error written once, in its branch of swarmlog/errors/ or its wing's
errors.py, drawn in the package's docstring as it is, and imported, shown and pickled as swarmlog.errors.X."""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
import re

import pytest
from confluent_kafka import KafkaError

import swarmlog
from swarmlog import cli, errors
from swarmlog.errors import (
    EventError,
    KafkaSideError,
    KafkaUnavailable,
    MirrorError,
    PostgresUnavailable,
    Retriable,
    SchemaError,
    ServiceUnavailable,
    SwarmlogError,
)
from swarmlog.kafka.errors import FENCED, UNKNOWN_TOPIC, UNREACHABLE, connect_failure, error_recorder, translate
from swarmlog.runtime._processes import _carry, _outcome

from ..conftest import REPO

PACKAGE = REPO / "platform" / "swarmlog"
BRANCHES = PACKAGE / "errors"
"""The tree's branches, a module each (``_base``, ``_kafka_side``, ...), behind the face ``swarmlog.errors``."""
ERROR_MODULES = ("swarmlog.errors", "swarmlog.llm.errors", "swarmlog.guard.errors", "swarmlog.aio.errors",
                 "swarmlog.integrations.errors")


def _classes() -> list[type[SwarmlogError]]:
    found = []
    for name in ERROR_MODULES:
        module = importlib.import_module(name)
        found += [c for c in vars(module).values()
                  if inspect.isclass(c) and c.__module__ == name and issubclass(c, SwarmlogError)]
    return found


def _drawing() -> list[str]:
    """The tree of every error: each class under its first base, its other bases named beside it."""
    classes = _classes()
    order = {c: i for i, c in enumerate(classes)}
    children: dict[type, list[type]] = {}
    for c in classes:
        if c is not SwarmlogError:
            children.setdefault(c.__bases__[0], []).append(c)
    lines = ["SwarmlogError"]

    def walk(node: type, prefix: str) -> None:
        kids = sorted(children.get(node, []), key=order.__getitem__)
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            also = ", ".join(b.__name__ for b in kid.__bases__[1:])
            also = f" (also {also})" if also else ""
            where = "" if kid.__module__ == "swarmlog.errors" else f"  [{kid.__module__}]"
            lines.append(f"{prefix}{'└── ' if last else '├── '}{kid.__name__}{also}{where}")
            walk(kid, prefix + ("    " if last else "│   "))

    walk(SwarmlogError, "")
    return lines


def test_the_module_docstring_draws_the_tree_the_classes_form():
    doc = errors.__doc__ or ""
    drawn = [line[4:] for line in doc.split("::\n\n", 1)[1].splitlines() if line.strip()]
    assert drawn == _drawing()


def test_few_errors_hang_directly_off_the_base():
    direct = {c.__name__ for c in _classes() if c.__bases__ == (SwarmlogError,)}
    assert direct == {"Retriable", "ConfigurationError", "MissingDependency", "ServiceUnavailable", "KafkaSideError",
                      "EventError", "MirrorError", "RunError", "NondeterminismError", "TokenError", "LLMError"}


def test_every_error_is_defined_in_an_errors_module():
    names = {c.__name__ for c in _classes()}
    strays = []
    for path in [*PACKAGE.rglob("*.py"), *(REPO / "connectors").rglob("*.py")]:
        if path.name == "errors.py" or path.parent == BRANCHES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).rpartition(".")[2] in names for b in node.bases):
                strays.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert strays == [], "define errors in their branch of swarmlog/errors/ or in the wing's errors.py"


def test_the_package_face_exports_every_error_derived_from_the_module():
    assert set(errors.__all__) == {c.__name__ for c in _classes() if c.__module__ == "swarmlog.errors"} | {"EventFate"}
    assert set(errors.__all__) <= set(swarmlog.__all__)
    assert all(getattr(swarmlog, name) is getattr(errors, name) for name in errors.__all__)


def _branches() -> list[object]:
    return [importlib.import_module(f"swarmlog.errors.{path.stem}") for path in sorted(BRANCHES.glob("_[!_]*.py"))]


def test_every_class_of_every_branch_is_swarmlog_errors_x_on_the_face():
    # A class a branch forgets to list in its __all__ would keep its branch's name and miss the face.
    defined = [value for branch in _branches() for value in vars(branch).values()
               if isinstance(value, type) and value.__module__.startswith("swarmlog.errors")]
    assert {c.__name__ for c in defined} == set(errors.__all__)
    assert all(c.__module__ == "swarmlog.errors" and getattr(errors, c.__name__) is c for c in defined)
    assert all(getattr(errors, name) is getattr(branch, name) for branch in _branches() for name in branch.__all__)


def test_nothing_imports_a_branch_of_the_tree_but_the_tree_itself():
    # The branches are machinery: an import of swarmlog.errors._runs would pin a file the tree may re-split.
    strays = []
    for root in (PACKAGE, REPO / "connectors", REPO / "tests", REPO / "bench", REPO / "examples"):
        for path in root.rglob("*.py"):
            if path.parent == BRANCHES:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [])
                strays += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names if re.search(r"(^|\.)errors\._", n)]
    assert strays == [], "import errors from swarmlog.errors"


@pytest.mark.parametrize("name", sorted(errors.__all__))
def test_every_error_class_pickles_as_swarmlog_errors_whichever_branch_defines_it(name):
    # pickle stores a class as its __module__ and name: the public path, as before the tree was split.
    cls = getattr(errors, name)
    data = pickle.dumps(cls, protocol=pickle.HIGHEST_PROTOCOL)
    assert b"swarmlog.errors" in data and b"swarmlog.errors._" not in data and pickle.loads(data) is cls


@pytest.mark.parametrize("cls", [c for c in _classes() if c.__module__ == "swarmlog.errors"], ids=lambda c: c.__name__)
def test_every_error_crosses_from_a_replay_process_to_its_parent_as_itself_with_its_fields(cls):
    error = _instance(cls)
    back = _outcome(pickle.dumps(("error", _carry(error))), 0, "a,b")
    assert type(back) is cls and str(back) == str(error) and back.args == error.args
    assert {k: v for k, v in vars(back).items() if k != "__notes__"} == vars(error)


# --- the Kafka side, every failure of it caught as one ------------------------------------------------


_SAMPLES = {"int": 1, "float": 1.0, "str": "x", "bool": False, "dict": {}}


def _instance(cls: type[SwarmlogError]) -> SwarmlogError:
    """``cls`` built with a plausible value for each of its keyword-only fields."""
    kwargs = {}
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self" and p.default is p.empty:
            annotation = str(p.annotation)
            kwargs[p.name] = ([] if "list" in annotation or "Sequence" in annotation else
                              next((v for k, v in _SAMPLES.items() if annotation.startswith(k)), "x"))
    return cls(**kwargs)


KAFKA_SIDE = sorted((c for c in _classes() if issubclass(c, KafkaSideError)), key=lambda c: c.__name__)


def test_the_kafka_side_is_the_log_and_its_topics_groups_transactions_and_brokers():
    assert {c.__name__ for c in KAFKA_SIDE} == {
        "KafkaSideError", "KafkaUnavailable", "KafkaHandshakeFailed", "KafkaOperationFailed", "TopicNotFound",
        "TopicNotSinglePartition", "TopicExists", "TopicCreateFailed", "CopyFailed", "ReadFailed", "EventNotFound",
        "HistoryIncomplete", "HistoryHoles", "AppendFailed", "AppendIncomplete", "TransactionAborted", "AgentFenced",
        "GroupHasActiveMembers", "GroupResetFailed", "GroupNotAtStart"}


@pytest.mark.parametrize("cls", KAFKA_SIDE, ids=lambda c: c.__name__)
def test_except_kafka_side_error_catches_each_kafka_side_failure(cls):
    error = _instance(cls)
    with pytest.raises(KafkaSideError) as caught:
        raise error
    assert caught.value is error and (str(error) or cls is KafkaSideError)  # each says what happened


@pytest.mark.parametrize("err", [
    *(KafkaError(code) for code in sorted(UNREACHABLE)),
    *(KafkaError(code) for code in sorted(FENCED)),
    *(KafkaError(code) for code in sorted(UNKNOWN_TOPIC)),
    KafkaError(KafkaError._STATE), KafkaError(KafkaError.INVALID_TXN_STATE, txn_requires_abort=True),
    KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, retriable=True),
], ids=lambda e: e.name())
def test_what_the_kafka_seam_translates_librdkafkas_errors_into_is_caught_as_a_kafka_side_failure(err):
    with pytest.raises(KafkaSideError):
        raise translate(err, operation="appending to 't'", bootstrap="10.9.9.9:9092", topic="t", agent="a")


@pytest.mark.parametrize(("address", "event", "stage"), [
    ("10.9.9.7:9092", KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#10.9.9.7:9092 failed: Connection refused"),
     None),
    ("10.9.9.8:9092", KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "SASL authentication error"), "SASL"),
    ("10.9.9.9:9092", KafkaError(KafkaError._SSL, "SSL handshake failed"), "TLS"),
])
def test_an_unreachable_broker_is_a_kafka_side_failure_and_a_service_unavailable(address, event, stage):
    error_recorder(address)(event)
    err = connect_failure(address, operation="describing topic 't'", timeout_s=1)
    assert isinstance(err, KafkaSideError) and isinstance(err, ServiceUnavailable) and err.service == "Kafka"
    assert cli.exit_code(err) == cli.EXIT_UNAVAILABLE
    assert getattr(err, "stage", None) == stage
    assert err.retriable is (stage is None)  # a handshake refused is a setting to fix, not a wait


def test_every_error_the_kafka_package_and_the_logs_raise_is_a_kafka_side_event_or_configuration_error():
    allowed = (KafkaSideError, EventError, errors.ConfigurationError)
    strays = []
    for path in [*(PACKAGE / "kafka").rglob("*.py"), *(PACKAGE / "log").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                cls = getattr(errors, node.exc.func.id, None)
                if isinstance(cls, type) and issubclass(cls, SwarmlogError) and not issubclass(cls, allowed):
                    strays.append(f"{path.relative_to(REPO)}:{node.lineno} {cls.__name__}")
    assert strays == []


# --- the other families and the axes -------------------------------------------------------------


@pytest.mark.parametrize("name", ["SchemaClash", "SchemaNotFound", "UnknownEventType"])
def test_schema_errors_are_schema_errors_and_the_command_line_says_usage(name):
    error = _instance(getattr(errors, name))
    assert isinstance(error, SchemaError) and isinstance(error, EventError)
    assert cli.exit_code(error) == cli.EXIT_USAGE


def test_postgres_unreachable_is_a_mirror_error_and_a_service_unavailable():
    error = PostgresUnavailable(address="db:5432/swarmlog", detail="connection refused")
    assert isinstance(error, MirrorError) and isinstance(error, ServiceUnavailable) and error.service == "Postgres"
    assert cli.exit_code(error) == cli.EXIT_UNAVAILABLE and "cannot reach Postgres at db:5432/swarmlog" in str(error)


def test_the_retriable_axis_is_a_class_to_catch_and_an_attribute_on_every_error():
    retriable = {c.__name__ for c in _classes() if issubclass(c, Retriable) and c is not Retriable}
    assert retriable == {"KafkaUnavailable", "PostgresUnavailable", "MirrorBehind", "LLMUnavailable"}
    for cls in _classes():
        if cls not in (Retriable, SwarmlogError) and not inspect.isabstract(cls):
            assert _instance(cls).retriable is issubclass(cls, Retriable) or cls is errors.KafkaOperationFailed
    assert KafkaUnavailable(address="k:9092", detail="d").retriable
    retried = translate(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, retriable=True), operation="o", bootstrap="b")
    assert type(retried) is errors.KafkaOperationFailed and retried.retriable  # librdkafka's verdict, per error


def test_no_error_module_imports_more_than_the_base_of_the_errors():
    # swarmlog.errors is imported by every command at start: it stays a package of classes, each branch
    # importing only the others (never the runtime: that would be a circle, as everything imports errors).
    imported = set()
    for path in BRANCHES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(f"{'.' * node.level}{node.module}")
    assert imported - {"__future__", "collections.abc", "typing"} == {f".{p.stem}" for p in BRANCHES.glob("_[!_]*.py")}


def test_a_regression_workers_failure_is_a_run_error_with_its_facts_and_what_to_do():
    error = errors.RegressionWorkerFailed(topic="swarm.run7", worker="pid 12, PYTHONHASHSEED=0",
                                          error_type="SwarmImportFailed", detail="no module named x")
    assert isinstance(error, errors.RunError) and not isinstance(error, ServiceUnavailable)
    assert (error.topic, error.worker, error.error_type, error.detail) == (
        "swarm.run7", "pid 12, PYTHONHASHSEED=0", "SwarmImportFailed", "no module named x")
    assert "replaying swarm.run7" in str(error) and "swarmlog replay --swarm" in str(error)
    assert cli.exit_code(error) == cli.EXIT_FAILED and not error.retriable
