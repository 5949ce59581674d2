"""The guard knows the supported agent frameworks (issue 27, item 4): their own bookkeeping — the clock,
the environment, entropy for ids — passes inside a handler with no trust_library line, and what the
handler itself does, or what they do on its behalf beyond bookkeeping (a thread), stays refused."""

from __future__ import annotations

import os
import uuid

import pytest

from swarmlog.guard import ForbiddenCall, guarded
from swarmlog.guard._exemptions import FRAMEWORKS, TRUSTED_LIBRARIES


def test_every_supported_frameworks_packages_are_trusted_without_a_trust_library_line():
    for framework, packages in FRAMEWORKS.items():
        assert packages <= TRUSTED_LIBRARIES, framework


def test_langgraphs_ids_and_configuration_pass_but_the_handlers_own_reads_do_not():
    # Imported here, outside the guard as at the top of a module, and only by the worker that runs this test.
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.graph.message import add_messages

    with guarded(agent="a", offset=1):
        checkpoint_id = uuid6(clock_seq=1)  # LangGraph's checkpoint ids: the clock and entropy
        merged = add_messages([], [HumanMessage("hi")])  # gives the message a uuid4 id
        from langchain_core.utils.utils import from_env

        from_env("SWARMLOG_NOT_SET", default="x")()  # LangChain's configuration from the environment
    assert checkpoint_id.version == 6 and merged[0].id
    with pytest.raises(ForbiddenCall, match=r"uuid\.uuid4\(\)"):
        with guarded(agent="a", offset=1):
            uuid.uuid4()
    with pytest.raises(ForbiddenCall, match="environ"):
        with guarded(agent="a", offset=1):
            os.environ.get("HOME")


def test_langchains_thread_pool_stays_refused():
    from langchain_core.runnables.config import get_executor_for_config

    with pytest.raises(ForbiddenCall, match="another thread"):
        with guarded(agent="a", offset=1):
            with get_executor_for_config({}) as pool:
                list(pool.map(str, [1, 2]))


def test_anthropics_credential_discovery_passes_but_a_handlers_read_of_the_same_file_does_not(tmp_path, monkeypatch):
    import pathlib

    import anthropic
    import httpx2

    config = tmp_path / "anthropic"
    config.mkdir()
    (config / "active_config").write_text("default\n")
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(config))
    client = httpx2.Client()
    with guarded(agent="a", offset=1):  # anthropic 2.17 reads its active profile whenever a client is built
        anthropic.Anthropic(api_key="sk-ant-test", http_client=client)
    with pytest.raises(ForbiddenCall, match=r"read_text"):
        with guarded(agent="a", offset=1):
            pathlib.Path(config / "active_config").read_text()


# --- the OpenAI Agents SDK and pydantic-ai: their bookkeeping passes, the handler's own does not --------------


def test_the_agents_sdks_environment_reads_and_trace_exporter_thread_pass_but_the_handlers_do_not():
    import threading

    from agents.models import get_default_model
    from agents.tracing.processor_interface import TracingExporter
    from agents.tracing.processors import BatchTraceProcessor

    class Nowhere(TracingExporter):
        def export(self, items):
            pass

    processor = BatchTraceProcessor(Nowhere())
    with guarded(agent="a", offset=1):
        model = get_default_model()  # os.getenv("OPENAI_DEFAULT_MODEL") in the SDK
        processor._ensure_thread_started()  # the SDK's exporter, on a run's first trace
    assert model and processor._worker_thread is not None
    processor.shutdown()
    with pytest.raises(ForbiddenCall, match="getenv"):
        with guarded(agent="a", offset=1):
            os.getenv("OPENAI_DEFAULT_MODEL")
    with pytest.raises(ForbiddenCall, match="another thread"):
        with guarded(agent="a", offset=1):
            threading.Thread(target=print)


def test_pydantic_ais_ids_clock_and_banner_pass_but_the_handlers_own_reads_do_not():
    import sys

    from pydantic_ai import _display
    from pydantic_ai._uuid import uuid7

    with guarded(agent="a", offset=1):
        run_id = uuid7()  # pydantic-ai's run ids: the clock (time.time_ns) and entropy
        # its first-run banner: whether stderr is a terminal, its width, COLUMNS, then the banner (not under pytest)
        _display.display_agent_banner(name="a", model="test", output_type=str, tools=0, capabilities=0)
    assert run_id.version == 7
    with pytest.raises(ForbiddenCall, match="time_ns|uuid4"):
        with guarded(agent="a", offset=1):
            import time

            time.time_ns()
    with pytest.raises(ForbiddenCall, match="isatty"):
        with guarded(agent="a", offset=1):
            sys.stderr.isatty()
