"""A rendered Helm release, run as local processes: what each pod would run, without Kubernetes.

``helm template`` gives every workload's container; this module turns one into a process:

* **command**: the container's ``command``, else the image's ``ENTRYPOINT`` (read from
  ``helm/Dockerfile``), then its ``args``, resolved in the virtual environment the wheel
  was installed into (the image's ``/opt/swarmlog`` venv is that environment here);
* **environment**: the image's ``ENV`` (its ``/opt/swarmlog`` paths mapped the same way; one
  naming a path that only the image build's ``COPY`` fills, such as a schema directory, is left
  out: what is tested is the wheel), then ``envFrom`` ConfigMaps, then ``env`` (values, and ``secretKeyRef`` /
  ``configMapKeyRef`` resolved from the rendered Secrets and ConfigMaps), as the kubelet
  layers them;
* **ports**: every pod has its own IP in Kubernetes, but these processes share 127.0.0.1,
  so the one deviation from the rendered spec is that ``--metrics-port`` gets a free port
  of its own; the probes' named port is resolved to it.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Manifest = dict[str, Any]

IMAGE_ROOT = "/opt/swarmlog"
"""The image's venv (helm/Dockerfile): the local venv stands in for it."""


@dataclass
class Workload:
    kind: str
    name: str
    component: str
    agent: str | None
    argv: list[str]
    env: dict[str, str]
    hook_weight: int | None
    ports: dict[str, int] = field(default_factory=dict)
    readiness_path: str | None = None
    liveness_path: str | None = None


def replica(workload: Workload) -> Workload:
    """Another pod of the same Deployment: the same command, with a metrics port of its own (pods
    have their own IPs in Kubernetes; these processes share 127.0.0.1)."""
    if "--metrics-port" not in workload.argv:
        return workload
    argv = list(workload.argv)
    i = argv.index("--metrics-port") + 1
    local = free_port()
    ports = {name: local if port == int(argv[i]) else port for name, port in workload.ports.items()}
    argv[i] = str(local)
    return dataclasses.replace(workload, argv=argv, ports=ports)


def image_config(dockerfile: Path, *, venv: Path) -> tuple[list[str], dict[str, str]]:
    """The final stage's ENTRYPOINT and ENV, with the image's venv paths pointing at ``venv``."""
    text = dockerfile.read_text().replace("\\\n", " ")
    final = text[text.rindex("\nFROM "):]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            for key, value in re.findall(r"(\w+)=(\S+)", line[4:]):
                local = value.replace(IMAGE_ROOT, str(venv))
                if key != "PATH" and local != value and not Path(local).exists():
                    continue  # filled by the image build, not by installing the wheel
                env[key] = local
    (entrypoint,) = re.findall(r"^ENTRYPOINT (\[.*\])$", final, re.MULTILINE)
    return json.loads(entrypoint), env


def _secret_data(secret: Manifest) -> dict[str, str]:
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    data.update(secret.get("stringData") or {})
    return data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def workloads(manifests: list[Manifest], *, dockerfile: Path, venv: Path, home: Path) -> list[Workload]:
    """Every Deployment and Job of the release as a :class:`Workload`."""
    configmaps = {m["metadata"]["name"]: m.get("data") or {} for m in manifests if m["kind"] == "ConfigMap"}
    secrets = {m["metadata"]["name"]: _secret_data(m) for m in manifests if m["kind"] == "Secret"}
    entrypoint, image_env = image_config(dockerfile, venv=venv)
    out = []
    for m in manifests:
        if m["kind"] not in ("Deployment", "Job"):
            continue
        (c,) = m["spec"]["template"]["spec"]["containers"]
        env = {"HOME": str(home), "LANG": "C.UTF-8"}
        env.update(image_env)
        env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
        for source in c.get("envFrom", []):
            ref = source["configMapRef"]["name"] if "configMapRef" in source else None
            assert ref is not None and ref in configmaps, f"{m['metadata']['name']}: envFrom {source} not rendered"
            env.update(configmaps[ref])
        for entry in c.get("env", []):
            if "value" in entry:
                env[entry["name"]] = str(entry["value"])
                continue
            ref = entry["valueFrom"]
            if "secretKeyRef" in ref:
                r = ref["secretKeyRef"]
                assert r["name"] in secrets, f"Secret {r['name']} is not part of the release"
                env[entry["name"]] = secrets[r["name"]][r["key"]]
            elif "configMapKeyRef" in ref:
                r = ref["configMapKeyRef"]
                env[entry["name"]] = configmaps[r["name"]][r["key"]]
            else:
                raise AssertionError(f"cannot resolve {entry} outside Kubernetes")
        command = c.get("command") or entrypoint
        argv = [*command, *c.get("args", [])]
        argv[0] = str(venv / "bin" / argv[0]) if "/" not in argv[0] else argv[0]
        ports: dict[str, int] = {}
        if "--metrics-port" in argv:
            i = argv.index("--metrics-port") + 1
            declared = int(argv[i])
            local = free_port()
            argv[i] = str(local)
            for p in c.get("ports", []):
                if p["containerPort"] == declared:
                    ports[p["name"]] = local
        labels = m["metadata"]["labels"]
        annotations = m["metadata"].get("annotations") or {}
        weight = annotations.get("helm.sh/hook-weight") if "helm.sh/hook" in annotations else None
        readiness = c.get("readinessProbe", {}).get("httpGet", {})
        liveness = c.get("livenessProbe", {}).get("httpGet", {})
        out.append(Workload(kind=m["kind"], name=m["metadata"]["name"], component=labels["app.kubernetes.io/component"],
                            agent=labels.get("swarmlog.io/agent"), argv=argv, env=env,
                            hook_weight=int(weight) if weight is not None else None, ports=ports,
                            readiness_path=readiness.get("path"), liveness_path=liveness.get("path")))
    return out


class Pod:
    """A workload's process, its output in files (a pod's log), one pair per life."""

    _lives = itertools.count(1)

    def __init__(self, workload: Workload, *, cwd: Path, logs: Path) -> None:
        self.workload = workload
        self.cwd = cwd
        self.logs = logs
        self.proc: subprocess.Popen[bytes] | None = None
        self.life = 0

    @property
    def stdout_path(self) -> Path:
        return self.logs / f"{self.workload.name}.{self.life}.out"

    @property
    def stderr_path(self) -> Path:
        return self.logs / f"{self.workload.name}.{self.life}.err"

    def start(self) -> Pod:
        self.life = next(self._lives)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.workload.argv, env=self.workload.env, cwd=self.cwd, stdout=out,
                                         stderr=err, stdin=subprocess.DEVNULL)
        return self

    def run_to_completion(self, timeout: float) -> int:
        self.start()
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def probe(self, path: str | None) -> tuple[int, str]:
        assert path is not None, f"{self.workload.name} has no such probe"
        port = self.workload.ports["metrics"]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            return -1, str(exc)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.probe(self.workload.readiness_path)
            if status == 200:
                return
            assert self.proc is not None and self.proc.poll() is None, (
                f"{self.workload.name} exited {self.proc.returncode if self.proc else None}: {self.stderr()[-3000:]}")
            assert time.monotonic() < deadline, f"{self.workload.name} not ready after {timeout} s: {status} {body}"
            time.sleep(0.3)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM, as the kubelet sends at the start of a pod's grace period."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def install_wheel(*, repo: Path, python: str, workdir: Path) -> Path:
    """Build the wheel and install it, with the ``metrics`` extra, into a fresh venv in ``workdir``."""
    dist = workdir / "dist"
    built = subprocess.run([python, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(repo)],
                           capture_output=True, text=True, timeout=600, cwd=workdir)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("swarmlog-*.whl")
    venv = workdir / "venv"
    made = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                                f"{wheel}[metrics]"], capture_output=True, text=True, timeout=900, cwd=workdir,
                               env=env)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def install_release(*, repo: Path, root: Path) -> dict[str, Path]:
    """What a release's pods run, outside the repo: the wheel in a fresh venv (``venv``), the swarm's code in
    an 'image' directory (``app``: ``tests/swarms.py`` as ``research_swarm``), a home and a logs directory."""
    assert not root.resolve().is_relative_to(repo)
    venv = install_wheel(repo=repo, python=sys.executable, workdir=root)
    app = root / "app"
    app.mkdir()
    # The user's image: their swarm's code, importable (the chart README's `ENV PYTHONPATH=/app`).
    shutil.copy(repo / "tests" / "swarms.py", app / "research_swarm.py")
    home = root / "home"
    home.mkdir()
    logs = root / "logs"
    logs.mkdir()
    return {"venv": venv, "app": app, "home": home, "logs": logs}
