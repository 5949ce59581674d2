"""Two code versions side by side (issue 31 item 2): the chart's two releases as rendered templates.

The release of a run in flight stays on its image and starts nothing new while its run drains; the
release of new runs runs the new image, and the versions it declares compatible become
``--accept-version`` on every agent.
"""

from __future__ import annotations

from pathlib import Path

from ..conftest import REPO
from .test_helm_chart import arg_after, component, container, render

CHART = REPO / "helm" / "swarmlog"
FIXTURES = REPO / "tests" / "fixtures"


def _release(helm: list[str], env: dict[str, str], name: str, values: Path) -> list[dict]:
    return render(helm, env, "template", name, str(CHART), "--namespace", "swarms", "-f", str(values))


def test_two_releases_run_two_code_versions_side_by_side_while_the_old_run_drains(helm, helm_env):
    old = _release(helm, helm_env, "run-17", FIXTURES / "helm-values-two-versions-draining.yaml")
    new = _release(helm, helm_env, "run-18", FIXTURES / "helm-values-two-versions-new.yaml")
    for manifests, tag, topic in ((old, "1.4.0", "swarm.run-17"), (new, "1.5.0", "swarm.run-18")):
        agents = component(manifests, "Deployment", "agent")
        assert len(agents) == 2
        for agent in agents:
            c = container(agent)
            assert c["image"].endswith(f":{tag}")
            assert agent["spec"]["strategy"]["type"] == "Recreate"  # never two lives of one agent
        configs = [m for m in manifests if m["kind"] == "ConfigMap" and "SWARMLOG_TOPIC" in m.get("data", {})]
        assert [c["data"]["SWARMLOG_TOPIC"] for c in configs] == [topic]
    # The draining release starts no new run; the new one does.
    assert component(old, "Job", "run-start") == []
    assert len(component(new, "Job", "run-start")) == 1
    # Only the new release goes on with runs of the old version (its changes behind versioned steps).
    for agent in component(old, "Deployment", "agent"):
        assert "--accept-version" not in container(agent)["args"]
    for agent in component(new, "Deployment", "agent"):
        args = container(agent)["args"]
        assert arg_after(args, "--accept-version") == "1.4.0" and args[args.index("--agent") + 1] in (
            "planner", "worker")
