"""The chart's regression Job (templates/regress-job.yaml): an Indexed Job that splits the recorded runs
across its pods. Rendered with the real helm; then its pods' rendered commands run as processes, with
swarmlog installed from the wheel outside the repository, each with the JOB_COMPLETION_INDEX Kubernetes
gives it, against the real dev Kafka and Postgres, and their reports merged with `swarmlog regress --merge`.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import REPO
from .release import Pod, install_release, workloads
from .test_helm_chart import (
    CHART,
    DOCKERFILE,
    PROD_VALUES,
    RELEASE,
    arg_after,
    component,
    container,
    env_of,
    pod_spec,
    render,
    render_fails,
    template_args,
    values_file,
)
from .test_regress import expected_groups, record_relay_runs

COMPLETIONS = 3


def test_the_regression_job_is_indexed_and_fails_only_the_index_whose_runs_changed(
        helm: list[str], helm_env: dict[str, str], tmp_path: Path) -> None:
    assert component(render(helm, helm_env, *template_args()), "Job", "regress") == []  # off by default
    manifests = render(helm, helm_env, *template_args(PROD_VALUES, values_file(tmp_path, {"regress": {
        "enabled": True, "topicsPattern": r"swarm\.research\..*", "completions": 8, "parallelism": 2, "jobs": 3}})))
    (job,) = component(manifests, "Job", "regress")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 8, 2)
    args = container(job)["args"]
    prod = yaml.safe_load(PROD_VALUES.read_text())
    assert args[:3] == ["regress", "--swarm", prod["swarm"]["app"]]
    assert arg_after(args, "--shards") == "8" and arg_after(args, "--jobs") == "3" and "--json" in args
    assert arg_after(args, "--topics-pattern") == r"swarm\.research\..*" and "--from-mirror" not in args
    # A verdict (3: not every run checked, 4: a run diverged) fails its index, not the Job's other pods.
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailIndex" and rule["onExitCodes"]["values"] == [3, 4]
    assert spec["backoffLimitPerIndex"] >= 0 and pod_spec(job)["restartPolicy"] == "Never"
    assert "helm.sh/hook" not in job["metadata"].get("annotations", {})
    assert "SWARMLOG_DATABASE_URL" not in env_of(job)  # a pattern needs no Postgres


def test_the_regression_job_can_take_the_runs_the_mirror_lists_and_then_gets_the_database(
        helm: list[str], helm_env: dict[str, str], tmp_path: Path) -> None:
    manifests = render(helm, helm_env, *template_args(PROD_VALUES, values_file(tmp_path, {"regress": {
        "enabled": True, "fromMirror": True, "since": "7d", "swarmName": "research"}})))
    (job,) = component(manifests, "Job", "regress")
    args = container(job)["args"]
    assert "--from-mirror" in args and arg_after(args, "--since") == "7d"
    assert arg_after(args, "--swarm-name") == "research" and "--topics-pattern" not in args
    assert "SWARMLOG_DATABASE_URL" in env_of(job)
    for overrides, message in (
            ({"enabled": True}, "choose the runs one way"),
            ({"enabled": True, "fromMirror": True, "topicsPattern": "x"}, "choose the runs one way"),
            ({"enabled": True, "topicsPattern": "x", "completions": 0}, "completions"),
            ({"enabled": True, "fromMirror": True, "since": "last week"}, "since")):
        stderr = render_fails(helm, helm_env, *template_args(PROD_VALUES, values_file(tmp_path, {
            "regress": overrides})))
        assert message in stderr, stderr
    stderr = render_fails(helm, helm_env, *template_args(values_file(tmp_path, {
        "database": {"url": ""}, "sink": {"enabled": False},
        "regress": {"enabled": True, "fromMirror": True}})))
    assert "regress.fromMirror" in stderr, stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel in a fresh venv, the swarm's code in an 'image' directory, a cwd outside the repo."""
    return install_release(repo=REPO, root=tmp_path_factory.mktemp("regress-release"))


def _report_line(stdout: str) -> dict[str, Any]:
    (line,) = [x for x in stdout.splitlines() if x.startswith("{")]
    return json.loads(line)


def test_the_rendered_indexed_job_splits_the_runs_across_its_pods_and_their_reports_merge(
        helm: list[str], helm_env: dict[str, str], tmp_path: Path, base_settings, registry,
        installed: dict[str, Path]) -> None:
    recorded = record_relay_runs(base_settings, registry, 9)
    expected = expected_groups(recorded["triggers"])
    broken = set().union(*expected.values()) if expected else set()
    values = {
        "image": {"repository": "registry.example.com/research-swarm", "tag": "test"},
        "swarm": {"app": "research_swarm:relay_late_fix", "runId": "regress-test", "seed": 1,
                  "agents": ["r0", "r1", "r2", "r3", "r4"]},
        "kafka": {"bootstrapServers": base_settings.bootstrap_servers, "topic": "unused", "replicationFactor": 1},
        "database": {"url": base_settings.database_url},
        "extraEnv": [{"name": "PYTHONPATH", "value": str(installed["app"])}],
        "regress": {"enabled": True, "topicsPattern": re.escape(recorded["prefix"]) + r"\..*",
                    "completions": COMPLETIONS, "jobs": 2},
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    manifests = render(helm, helm_env, "template", RELEASE, str(CHART), "--namespace", "swarms", "-f", str(path))
    (job,) = [w for w in workloads(manifests, dockerfile=DOCKERFILE, venv=installed["venv"], home=installed["home"])
              if w.component == "regress"]

    reports, codes = [], []
    for index in range(COMPLETIONS):  # what the Job controller starts: one pod per index, its index in the env
        job.env["JOB_COMPLETION_INDEX"] = str(index)
        job.name = f"regress-{index}"
        pod = Pod(job, cwd=installed["home"], logs=installed["logs"])
        codes.append(pod.run_to_completion(timeout=600))
        report = _report_line(pod.stdout())
        assert report["shard"] == [index, COMPLETIONS], pod.stderr()
        reports.append(report)
        (installed["logs"] / f"shard-{index}.json").write_text(json.dumps(report))
    shards = [{o["topic"] for o in r["outcomes"]} for r in reports]
    assert sorted(t for s in shards for t in s) == sorted(recorded["topics"])  # each run in exactly one pod
    for code, report in zip(codes, reports, strict=True):
        assert code == (4 if report["counts"]["diverged"] else 0), report["counts"]

    merged = subprocess.run([str(installed["venv"] / "bin" / "swarmlog"), "regress", "--json", "--merge",
                             *(str(installed["logs"] / f"shard-{i}.json") for i in range(COMPLETIONS))],
                            env=job.env, cwd=installed["home"], capture_output=True, text=True, timeout=120)
    assert merged.returncode == (4 if broken else 0), merged.stderr
    whole = json.loads(merged.stdout)
    assert whole["runs"] == len(recorded["topics"])
    assert {o["topic"] for o in whole["outcomes"] if o["status"] == "diverged"} == broken
    assert {g["handler"]: set(g["runs"]) for g in whole["groups"]} == expected
