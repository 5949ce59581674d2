"""The Helm chart deploys a swarm in the shape swarmlog's guarantees depend on.

Rendered with the real ``helm`` (``make tools`` builds it into ``.tools/bin``): one
single-replica, never-overlapping workload per agent (an agent's transactional.id must not
be live twice), exactly one sink per topic, the topic created by a hook before anything
runs, replay only on request and never while its group's consumers run, and credentials
always referenced from Secrets, never written into manifests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "swarmlog"
DOCKERFILE = REPO / "helm" / "Dockerfile"
PROD_VALUES = REPO / "tests" / "fixtures" / "helm-values-prod.yaml"
RELEASE = "research"

Manifest = dict[str, Any]


# --- running helm ----------------------------------------------------------------------


def run_helm(helm: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*helm, *args], env=env, capture_output=True, text=True, timeout=60)


def template_args(*values_files: Path) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", "swarms"]
    for path in values_files:
        args += ["-f", str(path)]
    return args


def values_file(directory: Path, overrides: dict[str, Any]) -> Path:
    """Overrides as a values file: typed, unlike --set, and deep-merged by helm."""
    path = directory / "overrides.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return path


def render(helm: list[str], env: dict[str, str], *args: str) -> list[Manifest]:
    result = run_helm(helm, env, *args)
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_fails(helm: list[str], env: dict[str, str], *args: str) -> str:
    result = run_helm(helm, env, *args)
    assert result.returncode != 0, f"helm {' '.join(args)} rendered values it should reject"
    return result.stderr


# --- reading manifests -----------------------------------------------------------------


def component(manifests: list[Manifest], kind: str, name: str) -> list[Manifest]:
    return [
        m for m in manifests
        if m["kind"] == kind and m["metadata"]["labels"].get("app.kubernetes.io/component") == name
    ]


def pod_spec(workload: Manifest) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container(workload: Manifest) -> dict[str, Any]:
    (only,) = pod_spec(workload)["containers"]
    return only


def env_of(workload: Manifest) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(workload).get("env", [])}


def arg_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def pod_workloads(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m["kind"] in ("Deployment", "StatefulSet", "Job")]


@pytest.fixture(scope="session")
def default_manifests(helm: list[str], helm_env: dict[str, str]) -> list[Manifest]:
    return render(helm, helm_env, *template_args())


@pytest.fixture(scope="session")
def prod_manifests(helm: list[str], helm_env: dict[str, str]) -> list[Manifest]:
    return render(helm, helm_env, *template_args(PROD_VALUES))


@pytest.fixture(scope="session")
def prod_values() -> dict[str, Any]:
    return yaml.safe_load(PROD_VALUES.read_text())


@pytest.fixture(scope="session")
def replay_manifests(
    helm: list[str], helm_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> list[Manifest]:
    overrides = values_file(tmp_path_factory.mktemp("replay"), {"replay": {"enabled": True, "to": 120000}})
    return render(helm, helm_env, *template_args(PROD_VALUES, overrides))


@pytest.fixture(params=["default", "prod"])
def manifests(request: pytest.FixtureRequest) -> list[Manifest]:
    return request.getfixturevalue(f"{request.param}_manifests")


@pytest.fixture
def configured_agents(request: pytest.FixtureRequest, manifests: list[Manifest]) -> list[str]:
    """The agent names of the values `manifests` was rendered from."""
    path = PROD_VALUES if request.node.callspec.params["manifests"] == "prod" else CHART / "values.yaml"
    return yaml.safe_load(path.read_text())["swarm"]["agents"]


# --- lint ------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[], [PROD_VALUES]], ids=["default", "prod"])
def test_chart_passes_strict_lint(helm: list[str], helm_env: dict[str, str], values: list[Path]) -> None:
    args = ["lint", "--strict", str(CHART)] + [a for p in values for a in ("-f", str(p))]
    result = run_helm(helm, helm_env, *args)
    assert result.returncode == 0, result.stdout + result.stderr


# --- agents ----------------------------------------------------------------------------


def test_every_agent_runs_in_its_own_single_replica_workload_that_never_overlaps(
    manifests: list[Manifest], configured_agents: list[str]
) -> None:
    agents = component(manifests, "Deployment", "agent")
    named = sorted(arg_after(container(d)["args"], "--agent") for d in agents)
    assert named == sorted(configured_agents)
    assert len({d["metadata"]["name"] for d in agents}) == len(agents)
    for deployment in agents:
        assert deployment["spec"]["replicas"] == 1
        # Recreate: the old pod is gone before the new one starts, so an agent's
        # transactional.id is never live in two pods during a rollout.
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        assert container(deployment)["args"][0] == "run"
        assert pod_spec(deployment)["terminationGracePeriodSeconds"] >= 60


def test_five_production_agents_get_their_names_run_id_and_integer_seed(
    prod_manifests: list[Manifest], prod_values: dict[str, Any]
) -> None:
    swarm = prod_values["swarm"]
    agents = component(prod_manifests, "Deployment", "agent")
    assert len(agents) == 5
    by_agent = {arg_after(container(d)["args"], "--agent"): d for d in agents}
    # Kubernetes names take a lowercased, `-`-joined form; --agent keeps the real name.
    assert by_agent["summarizer_v2"]["metadata"]["name"] == f"{RELEASE}-swarmlog-agent-summarizer-v2"
    for deployment in agents:
        args = container(deployment)["args"]
        assert args[1] == swarm["app"]
        assert arg_after(args, "--run-id") == swarm["runId"]
        # A values-file number reaches the template as a float; it must not print as 2.0240611e+07.
        assert arg_after(args, "--seed") == str(swarm["seed"])
        assert pod_spec(deployment)["terminationGracePeriodSeconds"] == 180


def test_agent_names_that_collide_as_kubernetes_names_are_rejected(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    overrides = values_file(tmp_path, {"swarm": {"agents": ["web_search", "web-search"]}})
    stderr = render_fails(helm, helm_env, *template_args(overrides))
    assert "rename one" in stderr


def test_each_deployment_selects_only_its_own_pods(manifests: list[Manifest]) -> None:
    deployments = [m for m in manifests if m["kind"] == "Deployment"]
    selectors = []
    for deployment in deployments:
        selector = deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
        selectors.append(selector)
    # No Deployment's selector matches another's pods: two agents never fight over one pod.
    for i, selector in enumerate(selectors):
        for j, other in enumerate(deployments):
            if i != j:
                assert not selector.items() <= other["spec"]["template"]["metadata"]["labels"].items()


# --- sink ------------------------------------------------------------------------------


def test_exactly_one_sink_with_one_replica_that_never_overlaps(manifests: list[Manifest]) -> None:
    (sink,) = component(manifests, "Deployment", "sink")
    assert sink["spec"]["replicas"] == 1
    assert sink["spec"]["strategy"] == {"type": "Recreate"}
    assert container(sink)["args"] == ["sink", "--metrics-port", "9400"]
    assert pod_spec(sink)["terminationGracePeriodSeconds"] >= 30


def test_the_sink_can_be_given_a_topics_pattern_and_its_consumer_group(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    values = {"sink": {"topicsPattern": "^swarm\\..*", "consumerGroup": "mirror-a"}}
    (sink,) = component(render(helm, helm_env, *template_args(values_file(tmp_path, values))), "Deployment", "sink")
    args = container(sink)["args"]
    assert arg_after(args, "--topics-pattern") == "^swarm\\..*"
    assert arg_after(args, "--group") == "mirror-a"
    assert "--include-side-topics" not in args
    values["sink"]["includeSideTopics"] = True
    (sink,) = component(render(helm, helm_env, *template_args(values_file(tmp_path, values))), "Deployment", "sink")
    assert "--include-side-topics" in container(sink)["args"]


def test_sinks_of_a_pattern_run_as_replicas_that_share_its_topics_and_roll_one_pod_at_a_time(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    values = {"sink": {"topicsPattern": "^swarm\\..*", "replicas": 3}}
    (sink,) = component(render(helm, helm_env, *template_args(values_file(tmp_path, values))), "Deployment", "sink")
    assert sink["spec"]["replicas"] == 3
    # A rolling update adds a sink before it removes one: the group hands topics over, the mirror never stops.
    assert sink["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert container(sink)["args"][:3] == ["sink", "--topics-pattern", "^swarm\\..*"]
    assert "--group" not in container(sink)["args"]  # the default group: swarmlog-sink, shared by the replicas


# --- starting the run ------------------------------------------------------------------


def test_the_run_is_started_by_a_hook_after_the_topic_and_before_any_agent(
    manifests: list[Manifest], configured_agents: list[str]
) -> None:
    (topic_job,) = component(manifests, "Job", "topic")
    (start,) = component(manifests, "Job", "run-start")
    annotations = start["metadata"]["annotations"]
    # pre-install: the agents' Deployments are created only after every pre-install hook
    # succeeded, so an agent's first read finds run.started. pre-upgrade: an upgrade that
    # changes swarm.runId or swarm.seed fails here, before any agent restarts with them.
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert int(annotations["helm.sh/hook-weight"]) > int(topic_job["metadata"]["annotations"]["helm.sh/hook-weight"])
    args = container(start)["args"]
    (agent, *_) = component(manifests, "Deployment", "agent")
    agent_args = container(agent)["args"]
    assert args[:3] == ["run", agent_args[1], "--start"]
    assert arg_after(args, "--run-id") == arg_after(agent_args, "--run-id")
    assert arg_after(args, "--seed") == arg_after(agent_args, "--seed")
    assert "--agent" not in args
    assert "envFrom" not in container(start)  # a hook: the ConfigMap does not exist yet
    assert pod_spec(start)["restartPolicy"] == "Never"


def test_agents_wait_a_bounded_time_for_the_run(manifests: list[Manifest]) -> None:
    for deployment in component(manifests, "Deployment", "agent"):
        assert int(arg_after(container(deployment)["args"], "--wait-for-run")) > 0


def test_no_run_start_hook_when_disabled(helm: list[str], helm_env: dict[str, str], tmp_path: Path) -> None:
    manifests = render(helm, helm_env, *template_args(values_file(tmp_path, {"runStart": {"enabled": False}})))
    assert component(manifests, "Job", "run-start") == []


# --- observability ---------------------------------------------------------------------


def test_agents_and_the_sink_serve_metrics_and_probes_on_the_port_they_are_given(
    manifests: list[Manifest],
) -> None:
    workloads = component(manifests, "Deployment", "agent") + component(manifests, "Deployment", "sink")
    assert workloads
    for workload in workloads:
        c = container(workload)
        port = int(arg_after(c["args"], "--metrics-port"))
        (named,) = c["ports"]
        assert (named["name"], named["containerPort"]) == ("metrics", port)
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(port)
    for job in [m for m in manifests if m["kind"] == "Job"]:
        assert "readinessProbe" not in container(job) and "--metrics-port" not in container(job)["args"]


def test_metrics_can_be_turned_off(helm: list[str], helm_env: dict[str, str], tmp_path: Path) -> None:
    manifests = render(helm, helm_env, *template_args(values_file(tmp_path, {"metrics": {"enabled": False}})))
    for workload in pod_workloads(manifests):
        c = container(workload)
        assert "--metrics-port" not in c["args"] and "livenessProbe" not in c and "ports" not in c


# --- service account and per-agent overrides -------------------------------------------


def test_a_created_service_account_carries_its_iam_annotations_and_exists_before_the_hooks(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/research-swarm"}
    manifests = render(helm, helm_env, *template_args(PROD_VALUES, values_file(tmp_path, {
        "serviceAccount": {"create": True, "annotations": role}})))
    (account,) = [m for m in manifests if m["kind"] == "ServiceAccount"]
    assert role.items() <= account["metadata"]["annotations"].items()
    assert account["automountServiceAccountToken"] is False
    weight = int(account["metadata"]["annotations"]["helm.sh/hook-weight"])
    for workload in pod_workloads(manifests):
        assert pod_spec(workload)["serviceAccountName"] == account["metadata"]["name"]
        assert pod_spec(workload)["automountServiceAccountToken"] is False
        hook = workload["metadata"].get("annotations", {}).get("helm.sh/hook-weight")
        if hook is not None:
            assert weight < int(hook)


def test_an_existing_service_account_is_only_referenced(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    manifests = render(helm, helm_env, *template_args(values_file(tmp_path, {"serviceAccount": {"name": "swarms"}})))
    assert not [m for m in manifests if m["kind"] == "ServiceAccount"]
    assert {pod_spec(w)["serviceAccountName"] for w in pod_workloads(manifests)} == {"swarms"}


def test_per_agent_overrides_apply_to_that_agent_only(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path, prod_values: dict[str, Any]
) -> None:
    big = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    manifests = render(helm, helm_env, *template_args(PROD_VALUES, values_file(tmp_path, {"agents": {"overrides": {
        "coder": {"resources": big, "extraEnv": [{"name": "SANDBOX_URL", "value": "http://sandbox:8080"}],
                  "podAnnotations": {"team": "coders"}}}}})))
    by_agent = {arg_after(container(d)["args"], "--agent"): d for d in component(manifests, "Deployment", "agent")}
    coder = by_agent.pop("coder")
    assert container(coder)["resources"] == big
    assert env_of(coder)["SANDBOX_URL"]["value"] == "http://sandbox:8080"
    assert "OPENAI_API_KEY" in env_of(coder)  # agents.extraEnv still applies
    assert coder["spec"]["template"]["metadata"]["annotations"]["team"] == "coders"
    for other in by_agent.values():
        assert container(other)["resources"] == prod_values["agents"]["resources"]
        assert "SANDBOX_URL" not in env_of(other)
        assert "team" not in other["spec"]["template"]["metadata"]["annotations"]


# --- topic -----------------------------------------------------------------------------


def test_topic_is_created_by_a_hook_before_any_agent_starts(manifests: list[Manifest]) -> None:
    (job,) = component(manifests, "Job", "topic")
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert container(job)["args"] == ["topic", "create"]
    # Hooks run before the release's ConfigMap exists: the Job carries its env inline.
    env = env_of(job)
    assert "envFrom" not in container(job)
    (configmap,) = [m for m in manifests if m["kind"] == "ConfigMap"]
    for name, value in configmap["data"].items():
        assert env[name]["value"] == value
    # A chart-made Secret the Job reads must be a hook that runs earlier.
    for secret in (m for m in manifests if m["kind"] == "Secret"):
        assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
            annotations["helm.sh/hook-weight"])


# --- configuration and secrets ---------------------------------------------------------


def test_env_carries_topic_and_durability_settings(
    prod_manifests: list[Manifest], prod_values: dict[str, Any]
) -> None:
    (configmap,) = [m for m in prod_manifests if m["kind"] == "ConfigMap"]
    data = configmap["data"]
    assert data["SWARMLOG_TOPIC"] == prod_values["kafka"]["topic"]
    assert data["SWARMLOG_BOOTSTRAP_SERVERS"] == prod_values["kafka"]["bootstrapServers"]
    assert data["SWARMLOG_REPLICATION_FACTOR"] == "3"
    assert data["SWARMLOG_MIN_INSYNC_REPLICAS"] == "2"
    assert data["SWARMLOG_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert data["SWARMLOG_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert data["SWARMLOG_KAFKA_LINGER_MS"] == "5"
    assert data["SWARMLOG_KAFKA_MESSAGE_MAX_BYTES"] == "4194304"
    for workload in component(prod_manifests, "Deployment", "agent") + component(
        prod_manifests, "Deployment", "sink"
    ):
        refs = [e["configMapRef"]["name"] for e in container(workload)["envFrom"]]
        assert refs == [configmap["metadata"]["name"]]


def test_default_topic_is_named_after_the_release(default_manifests: list[Manifest]) -> None:
    (configmap,) = [m for m in default_manifests if m["kind"] == "ConfigMap"]
    assert configmap["data"]["SWARMLOG_TOPIC"] == f"swarmlog.{RELEASE}"


def test_production_secrets_are_referenced_not_inlined(prod_manifests: list[Manifest]) -> None:
    assert not [m for m in prod_manifests if m["kind"] == "Secret"]
    existing = {"research-swarm-kafka-user", "research-swarm-pg-app", "research-swarm-llm"}
    for workload in pod_workloads(prod_manifests):
        for name, entry in env_of(workload).items():
            if name in ("SWARMLOG_KAFKA_SASL_USERNAME", "SWARMLOG_KAFKA_SASL_PASSWORD",
                        "SWARMLOG_DATABASE_URL", "OPENAI_API_KEY"):
                assert entry["valueFrom"]["secretKeyRef"]["name"] in existing, (name, entry)
                assert "value" not in entry
    (agent, *_) = component(prod_manifests, "Deployment", "agent")
    password = env_of(agent)["SWARMLOG_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == {"name": "research-swarm-kafka-user", "key": "password"}
    (sink,) = component(prod_manifests, "Deployment", "sink")
    assert env_of(sink)["SWARMLOG_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "research-swarm-pg-app", "key": "uri"}


def test_kafka_ca_is_mounted_as_the_file_librdkafka_is_pointed_at(prod_manifests: list[Manifest]) -> None:
    (configmap,) = [m for m in prod_manifests if m["kind"] == "ConfigMap"]
    ca_location = Path(configmap["data"]["SWARMLOG_KAFKA_SSL_CA_LOCATION"])
    for workload in pod_workloads(prod_manifests):
        (volume,) = [v for v in pod_spec(workload)["volumes"] if v["name"] == "kafka-ca"]
        assert volume["secret"]["secretName"] == "kafka-cluster-ca-cert"
        assert volume["secret"]["items"] == [{"key": "ca.crt", "path": ca_location.name}]
        (mount,) = [m for m in container(workload)["volumeMounts"] if m["name"] == "kafka-ca"]
        assert Path(mount["mountPath"]) == ca_location.parent


def test_inline_credentials_land_in_a_secret_never_in_the_configmap_or_pods(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    password, url = "s3cr3t-kafka", "postgresql://swarmlog:s3cr3t-pg@pg:5432/swarmlog"
    manifests = render(helm, helm_env, *template_args(values_file(tmp_path, {
        "kafka": {"securityProtocol": "SASL_SSL",
                  "sasl": {"username": "research", "password": password}},
        "database": {"url": url},
    })))
    (secret,) = [m for m in manifests if m["kind"] == "Secret"]
    assert secret["stringData"] == {"kafka-sasl-password": password, "database-url": url}
    others = yaml.safe_dump_all([m for m in manifests if m["kind"] != "Secret"])
    assert "s3cr3t" not in others
    (configmap,) = [m for m in manifests if m["kind"] == "ConfigMap"]
    assert configmap["data"]["SWARMLOG_KAFKA_SASL_USERNAME"] == "research"


def test_only_the_sink_the_mirror_migration_and_replay_receive_the_database_url(
        replay_manifests: list[Manifest]) -> None:
    for workload in pod_workloads(replay_manifests):
        gets_db = "SWARMLOG_DATABASE_URL" in env_of(workload)
        role = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        assert gets_db == (role in ("sink", "mirror-migrate", "replay")), role


# --- the mirror's schema ----------------------------------------------------------------


def test_the_mirror_is_migrated_by_a_hook_before_the_sink_with_the_owners_credentials(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    manifests = render(helm, helm_env, *template_args(PROD_VALUES, values_file(tmp_path, {
        "mirror": {"migrate": {"existingSecret": "pg-owner", "existingSecretKey": "uri"}}})))
    (job,) = component(manifests, "Job", "mirror-migrate")
    (topic_job,) = component(manifests, "Job", "topic")
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert int(annotations["helm.sh/hook-weight"]) > int(topic_job["metadata"]["annotations"]["helm.sh/hook-weight"])
    assert container(job)["args"] == ["mirror", "migrate", "--writer-role", "swarmlog_sink",
                                      "--reader-role", "swarmlog_reader"]
    assert pod_spec(job)["restartPolicy"] == "Never" and "envFrom" not in container(job)
    assert env_of(job)["SWARMLOG_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "pg-owner", "key": "uri"}
    # The sink keeps its own, least-privileged credentials: it runs no DDL.
    (sink,) = component(manifests, "Deployment", "sink")
    assert env_of(sink)["SWARMLOG_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "research-swarm-pg-app", "key": "uri"}
    assert container(sink)["args"][:1] == ["sink"]


def test_without_an_owner_secret_the_migration_uses_the_sinks_url_and_without_a_sink_none_runs(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path, default_manifests: list[Manifest]
) -> None:
    (job,) = component(default_manifests, "Job", "mirror-migrate")
    assert env_of(job)["SWARMLOG_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "database-url"
    for overrides in ({"sink": {"enabled": False}}, {"mirror": {"migrate": {"enabled": False}}}):
        manifests = render(helm, helm_env, *template_args(values_file(tmp_path, overrides)))
        assert component(manifests, "Job", "mirror-migrate") == []


# --- replay ----------------------------------------------------------------------------


def test_no_replay_job_unless_enabled(manifests: list[Manifest]) -> None:
    assert component(manifests, "Job", "replay") == []


def test_replay_job_re_runs_the_swarm_code_as_its_own_group_while_the_agents_run(
    replay_manifests: list[Manifest], prod_values: dict[str, Any]
) -> None:
    (job,) = component(replay_manifests, "Job", "replay")
    assert container(job)["args"] == [
        "replay", "--swarm", prod_values["swarm"]["app"], "--group", prod_values["replay"]["group"], "--json",
        "--to", "120000", "--publish"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    # Not a hook: a long replay must not hold `helm upgrade --wait` hostage.
    assert "helm.sh/hook" not in job["metadata"].get("annotations", {})
    # A divergence (exit 4) is an answer: the Job fails at once instead of replaying again.
    (rule,) = job["spec"]["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [4]
    for agent in component(replay_manifests, "Deployment", "agent"):
        assert agent["spec"]["replicas"] == 1


def test_replay_defaults_to_a_group_of_its_own_and_can_keep_a_kafka_tools_reset(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    manifests = render(helm, helm_env, *template_args(values_file(tmp_path, {
        "replay": {"enabled": True, "reset": False, "publish": False}})))
    (job,) = component(manifests, "Job", "replay")
    args = container(job)["args"]
    assert arg_after(args, "--group") == f"swarmlog-replay.swarmlog.{RELEASE}"
    assert "--no-reset" in args and "--publish" not in args and "--workers" not in args
    assert "SWARMLOG_DATABASE_URL" not in env_of(job)


def test_replay_workers_is_passed_on_and_must_be_at_least_one(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    manifests = render(helm, helm_env, *template_args(values_file(tmp_path, {
        "replay": {"enabled": True, "workers": 3}})))
    (job,) = component(manifests, "Job", "replay")
    assert arg_after(container(job)["args"], "--workers") == "3"
    stderr = render_fails(helm, helm_env, *template_args(values_file(tmp_path, {
        "replay": {"enabled": True, "workers": 0}})))
    assert "workers" in stderr


def test_replay_refuses_an_agents_own_group(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path, prod_values: dict[str, Any]
) -> None:
    group = f"swarmlog.{prod_values['kafka']['topic']}.planner"
    overrides = values_file(tmp_path, {"replay": {"enabled": True, "group": group}})
    stderr = render_fails(helm, helm_env, *template_args(PROD_VALUES, overrides))
    assert "own consumer group" in stderr and "planner" in stderr


@pytest.fixture(scope="session")
def notes_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart whose NOTES.txt also renders into a ConfigMap.

    `helm template` does not print NOTES, and `helm install --dry-run` needs a cluster.
    """
    chart = tmp_path_factory.mktemp("notes") / "swarmlog"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "notes" -}}\n' + notes + "\n{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ include "notes" . | quote }}\n')
    return chart


def render_notes(helm: list[str], env: dict[str, str], chart: Path, *values: Path) -> str:
    args = ["template", RELEASE, str(chart), "-n", "swarms", "--show-only", "templates/notes.yaml"]
    for path in values:
        args += ["-f", str(path)]
    (configmap,) = render(helm, env, *args)
    return configmap["data"]["notes"]


def test_notes_say_how_to_replay_without_stopping_the_agents_and_where_the_report_is(
    helm: list[str], helm_env: dict[str, str], notes_chart: Path, tmp_path: Path
) -> None:
    before = render_notes(helm, helm_env, notes_chart, PROD_VALUES)
    assert "--set replay.enabled=true" in before and "agents keep running" in before
    assert "replicas=0" not in before
    replay = values_file(tmp_path, {"replay": {"enabled": True}})
    during = render_notes(helm, helm_env, notes_chart, PROD_VALUES, replay)
    assert f"kubectl -n swarms logs job/{RELEASE}-swarmlog-replay-1 | tail -n 1" in during
    assert "replay_reports" in during and "exit 4" in during
    assert "--set replay.enabled=false" in during


# --- what the chart rejects ------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"sink": {"replicas": -1}}, "/sink/replicas"),
        ({"agents": {"replicas": 2}}, "/agents/replicas"),
        ({"swarm": {"agents": []}}, "/swarm/agents"),
        ({"swarm": {"agents": ["planner", "planner"]}}, "/swarm/agents"),
        ({"swarm": {"agents": ["has space"]}}, "/swarm/agents"),
        ({"image": {"tag": 1.1}}, "/image/tag"),
        ({"sink": {"replica": 1}}, "replica"),
        ({"kafka": {"replicationFactor": 0}}, "/kafka/replicationFactor"),
        ({"kafka": {"securityProtocol": "TLS"}}, "/kafka/securityProtocol"),
        ({"kafka": {"bootstrapServers": "kafka"}}, "/kafka/bootstrapServers"),
        ({"swarm": {"app": "my_swarm.Swarm"}}, "/swarm/app"),
        ({"agents": {"overrides": {"planner": {"replicas": 2}}}}, "/agents/overrides/planner"),
        ({"metrics": {"port": 0}}, "/metrics/port"),
        ({"serviceAccountName": "swarms"}, "serviceAccountName"),
    ],
    ids=["sink-replicas-negative", "agent-replicas-2", "no-agents", "repeated-agent", "agent-name",
         "numeric-tag", "typo", "replication-0", "protocol", "no-port", "app-not-module-colon-class",
         "override-not-a-pod-setting", "metrics-port-0", "old-service-account-key"],
)
def test_values_schema_rejects(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path, overrides: dict[str, Any],
    message: str,
) -> None:
    stderr = render_fails(helm, helm_env, *template_args(values_file(tmp_path, overrides)))
    assert "schema" in stderr and message in stderr, stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kafka": {"replicationFactor": 1, "minInsyncReplicas": 2}}, "NOT_ENOUGH_REPLICAS"),
        ({"kafka": {"securityProtocol": "SASL_SSL"}}, "kafka.sasl.existingSecret"),
        ({"kafka": {"securityProtocol": "SASL_SSL",
                    "sasl": {"existingSecret": "s", "password": "p"}}}, "not both"),
        ({"kafka": {"tls": {"caSecret": "kafka-ca"}}}, "does not use TLS"),
        ({"kafka": {"extraConfig": {"sasl.password": "p"}}}, "is a credential"),
        ({"kafka": {"extraConfig": {"security.protocol": "SSL"}}}, "its own value"),
        ({"database": {"url": ""}}, "database.existingSecret"),
        ({"database": {"existingSecret": "pg"}}, "not both"),
        ({"agents": {"overrides": {"plannr": {"resources": {}}}}}, "not one of swarm.agents"),
        ({"sink": {"replicas": 2}}, "sink.topicsPattern is empty: one topic is one partition"),
    ],
    ids=["min-isr-above-rf", "sasl-without-credentials", "sasl-secret-and-password",
         "ca-without-tls", "password-in-configmap", "shadowed-setting", "no-database",
         "database-twice", "override-for-no-agent", "one-topic-sink-replicas-2"],
)
def test_templates_reject_inconsistent_values(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path, overrides: dict[str, Any],
    message: str,
) -> None:
    stderr = render_fails(helm, helm_env, *template_args(values_file(tmp_path, overrides)))
    assert message in stderr, stderr


# --- the image -------------------------------------------------------------------------


def test_image_runs_swarmlog_as_the_non_root_user_the_chart_expects() -> None:
    dockerfile = DOCKERFILE.read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    assert re.search(rf"^USER {uid}(:\d+)?$", dockerfile, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["swarmlog"\]$', dockerfile, re.MULTILINE)
    # The wheel carries the schemas (package data): the build stage has what pyproject.toml maps,
    # and no second copy of them could shadow the installed ones.
    assert re.search(r"^COPY schemas/ schemas/$", dockerfile, re.MULTILINE)
    assert re.search(r"^COPY examples/ examples/$", dockerfile, re.MULTILINE)
    assert "SWARMLOG_SCHEMA_DIR" not in dockerfile
    assert re.search(r"^\s+PYTHONHASHSEED=0\b", dockerfile, re.MULTILINE)
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.MULTILINE)


def test_the_images_agents_get_the_c_modules_and_no_compiler() -> None:
    _, build, runtime = re.split(r"^FROM ", DOCKERFILE.read_text(), flags=re.MULTILINE)
    assert re.search(r"apt-get install -y --no-install-recommends gcc libc6-dev", build)
    # The build stage fails if an optional extension did not compile: every one pyproject.toml lists.
    imported = re.search(r'python -c "import ([\w., ]+)"', build)
    assert imported is not None
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    exts = {ext["name"] for ext in setuptools["ext-modules"]}
    assert set(imported.group(1).replace(" ", "").split(",")) == exts
    assert "apt-get" not in runtime and "gcc" not in runtime


def test_a_derived_image_can_pip_install_into_swarmlogs_environment() -> None:
    """`FROM swarmlog` + `RUN pip install my-swarm` runs as the image's USER: the venv must be theirs."""
    dockerfile = DOCKERFILE.read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    venv = re.search(r"^RUN python -m venv (\S+)$", dockerfile, re.MULTILINE)
    assert venv
    assert re.search(rf"^COPY --from=build --chown={uid}:{uid} {re.escape(venv.group(1))} {re.escape(venv.group(1))}$",
                     dockerfile, re.MULTILINE)
    assert re.search(rf"^ENV PATH={re.escape(venv.group(1))}/bin:\$PATH", dockerfile, re.MULTILINE)
    # The chart turns --metrics-port on: the image must have the metrics extra.
    assert re.search(r"pip install '\.\[[a-z,]*metrics[a-z,]*\]'", dockerfile)


# --- the console -----------------------------------------------------------------------


def test_the_console_is_off_by_default(default_manifests: list[Manifest]) -> None:
    assert component(default_manifests, "Deployment", "console") == []
    assert component(default_manifests, "Service", "console") == []


def test_the_console_serves_read_only_behind_a_service_with_its_own_reader_url(
    helm: list[str], helm_env: dict[str, str], tmp_path: Path
) -> None:
    overrides = values_file(tmp_path, {"console": {"enabled": True, "database": {"existingSecret": "console-db"}}})
    manifests = render(helm, helm_env, *template_args(PROD_VALUES, overrides))
    (deployment,) = component(manifests, "Deployment", "console")
    (service,) = component(manifests, "Service", "console")
    args = container(deployment)["args"]
    assert args[:2] == ["ui", "--host"] and arg_after(args, "--host") == "0.0.0.0"
    assert arg_after(args, "--role") == "swarmlog_reader"  # what it reads as, whatever its login role may do
    assert arg_after(args, "--swarm") == yaml.safe_load(PROD_VALUES.read_text())["swarm"]["app"]
    (port,) = container(deployment)["ports"]
    assert (port["name"], port["containerPort"]) == ("http", int(arg_after(args, "--port")))
    assert container(deployment)["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["ports"][0]["targetPort"] == "http"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    # The reader's URL from its own Secret, never the sink's.
    url = env_of(deployment)["SWARMLOG_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert url == {"name": "console-db", "key": "url"}
    assert pod_spec(deployment)["automountServiceAccountToken"] is False
