"""The ``pcluster`` CLI adapter: finding it, running it, reading its JSON, its errors as one line.
(Over 350 lines as one module on purpose: these four are the one adapter to one CLI and change together.)

aws-parallelcluster lives in its own virtual environment (pipx, or ``pip install
'ddpctl[pcluster]'`` into a venv of its own): it pins packages (attrs, packaging) older than
ddpctl's. ddpctl finds the executable as ``$DDPCTL_PCLUSTER``, else ``pcluster`` on PATH, and its
Python from the script's shebang (``schema.py`` runs the package's schema there).

Every command prints one JSON document on stdout and exits 1 for *any* failure, including a
successful ``--dryrun true`` ("Request would have succeeded, but DryRun flag is set."), so the
adapter reads the JSON and never the exit status. The CLI logs to ``PCLUSTER_LOG_FILE``, which
ddpctl points into the cluster's directory (a temporary directory for dry runs), never to
``~/.parallelcluster``. AWS settings (credentials, profile, ``AWS_ENDPOINT_URL``) reach pcluster
through the environment, as they reach boto3 in ddpctl; nothing secret is put on a command line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...model.errors import DdpctlError, UsageError

ENV_EXE = "DDPCTL_PCLUSTER"
INSTALL_HINT = (
    "install aws-parallelcluster in a venv of its own (`pipx install 'aws-parallelcluster>=3.10'`, "
    "or `python3 -m venv ~/.venvs/pcluster && ~/.venvs/pcluster/bin/pip install 'aws-parallelcluster>=3.10'`), "
    f"then put `pcluster` on PATH or set {ENV_EXE}=/path/to/pcluster"
)
CALL_TIMEOUT_S = 300.0
CREATE_TIMEOUT_S = 1200.0  # validation, CDK synthesis (Node.js) and the template upload
MAX_PAGES = 100  # of describe-cluster-instances (EC2 gives up to 1000 instances a page)

DRYRUN_OK = "Request would have succeeded, but DryRun flag is set."
NOT_FOUND_RE = re.compile(r"Cluster '[^']*' does not exist")


class PclusterError(DdpctlError):
    """pcluster answered with an error (one line, already explained)."""


@dataclass(frozen=True)
class Install:
    exe: str  # the pcluster script
    python: str  # the interpreter of its venv (has the pcluster package)


def find_pcluster(env: Mapping[str, str] | None = None) -> Install:
    """``$DDPCTL_PCLUSTER`` or ``pcluster`` on PATH, and its venv's Python; one line if missing."""
    env = os.environ if env is None else env
    given = env.get(ENV_EXE, "")
    if given:
        exe = given if os.sep in given else shutil.which(given, path=env.get("PATH", os.defpath))
        if not exe or not os.access(exe, os.X_OK) or not Path(exe).is_file():
            raise UsageError(f"{ENV_EXE}={given} is not an executable pcluster: {INSTALL_HINT}")
    else:
        exe = shutil.which("pcluster", path=env.get("PATH", os.defpath))
        if not exe:
            raise DdpctlError(f"the pcluster CLI (aws-parallelcluster) is not installed: {INSTALL_HINT}")
    python = interpreter_of(Path(exe))
    if not python:
        raise DdpctlError(f"cannot find the Python of {exe} (no shebang naming one): {INSTALL_HINT}")
    return Install(exe=str(exe), python=python)


def interpreter_of(script: Path) -> str:
    """The Python a console script runs with: its shebang, or pip's ``/bin/sh`` trampoline for long paths."""
    real = script.resolve()
    try:
        head = real.read_bytes()[:1024].decode(errors="replace").splitlines()
    except OSError:
        return ""
    candidates: list[str] = []
    if head and head[0].startswith("#!"):
        first = head[0][2:].strip().split()
        if first and first[0] not in ("/bin/sh", "/usr/bin/env"):
            candidates.append(first[0])
        if len(head) > 1:  # '''exec' "/very/long/path/bin/python" "$0" "$@"
            match = re.match(r"""^'''exec' "?([^"\s]+)"?""", head[1])
            if match:
                candidates.append(match.group(1))
    candidates.append(str(real.parent / "python"))
    for candidate in candidates:
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return ""


# ---- typed answers (pure) ---------------------------------------------------------------------


@dataclass(frozen=True)
class HeadNode:
    instance_id: str
    state: str
    public_ip: str
    private_ip: str
    instance_type: str


@dataclass(frozen=True)
class ClusterInfo:
    """``pcluster describe-cluster``, the parts ddpctl uses."""

    name: str
    status: str  # CREATE_IN_PROGRESS, CREATE_COMPLETE, CREATE_FAILED, DELETE_IN_PROGRESS, ...
    stack_status: str
    fleet_status: str
    head: HeadNode | None
    failures: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)  # the stack's tags (the configuration's Tags among them)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClusterInfo:
        head = doc.get("headNode") or None
        return cls(
            name=str(doc.get("clusterName", "")),
            status=str(doc.get("clusterStatus", "")),
            stack_status=str(doc.get("cloudFormationStackStatus", "")),
            fleet_status=str(doc.get("computeFleetStatus", "")),
            head=HeadNode(
                instance_id=str(head.get("instanceId", "")),
                state=str(head.get("state", "")),
                public_ip=str(head.get("publicIpAddress", "") or ""),
                private_ip=str(head.get("privateIpAddress", "") or ""),
                instance_type=str(head.get("instanceType", "")),
            )
            if head
            else None,
            failures=tuple(
                f"{f.get('failureCode', '')}: {f.get('failureReason', '')}".strip(": ")
                for f in doc.get("failures") or []
            ),
            tags={str(t.get("key", "")): str(t.get("value", "")) for t in doc.get("tags") or []},
        )

    @property
    def failed(self) -> bool:
        return self.status.endswith("_FAILED") or self.stack_status.startswith("ROLLBACK")


@dataclass(frozen=True)
class ClusterInstance:
    """One instance of ``pcluster describe-cluster-instances`` (its API model ``ClusterInstance``)."""

    instance_id: str
    instance_type: str
    state: str  # pending, running, shutting-down, terminated, stopping, stopped
    node_type: str  # HeadNode, ComputeNode, LoginNode
    private_ip: str
    public_ip: str = ""
    queue: str = ""  # compute nodes: the Slurm queue
    launch_time: str = ""

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClusterInstance:
        return cls(
            instance_id=str(doc.get("instanceId", "")),
            instance_type=str(doc.get("instanceType", "")),
            state=str(doc.get("state", "") or ""),
            node_type=str(doc.get("nodeType", "") or ""),
            private_ip=str(doc.get("privateIpAddress", "") or ""),
            public_ip=str(doc.get("publicIpAddress", "") or ""),
            queue=str(doc.get("queueName", "") or ""),
            launch_time=str(doc.get("launchTime", "") or ""),
        )


@dataclass(frozen=True)
class CreateResult:
    ok: bool  # created (or, for a dry run, would be)
    message: str
    warnings: tuple[str, ...] = ()  # validator findings below ERROR
    doc: dict[str, Any] = field(default_factory=dict)


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_findings(doc: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) from ``configurationValidationErrors`` / ``validationMessages``."""
    errors, warnings = [], []
    for item in list(doc.get("configurationValidationErrors") or []) + list(doc.get("validationMessages") or []):
        text = f"{item.get('type', 'validator')}: {one_line(item.get('message', ''), 240)}"
        (errors if item.get("level") == "ERROR" else warnings).append(text)
    return errors, warnings


def explain(doc: Mapping[str, Any], action: str, region: str) -> str:
    """A pcluster error document as one line that says what to do."""
    message = one_line(doc.get("message", "") or "no message")
    errors, _ = validation_findings(doc)
    if errors:
        more = f" (+{len(errors) - 2} more)" if len(errors) > 2 else ""
        return (
            f"ParallelCluster refused the configuration ({action}): {'; '.join(errors[:2])}{more}: "
            "fix the flags (--subnet-id, --instance-type, --ami...) and try again"
        )
    if "Unable to locate credentials" in message or (
        "credentials" in message.lower() and "not found" in message.lower()
    ):
        return (
            "no AWS credentials found for pcluster: run `aws configure` (or `aws sso login`), or set AWS_PROFILE, "
            "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if "invalid or unsupported region" in message:
        return f"ParallelCluster does not support region {region!r} ({message}): choose another --region"
    if re.search(r"(AccessDenied|UnauthorizedOperation|not authorized)", message):
        return (
            f"your AWS identity may not {action} ({message}): it needs ParallelCluster's user policies "
            "(https://docs.aws.amazon.com/parallelcluster/latest/ug/iam-roles-in-parallelcluster-v3.html)"
        )
    if "already exists" in message:
        return f"pcluster {action}: {message}: take it down with `pcluster delete-cluster`, or pick another --name"
    return f"pcluster {action} failed in {region}: {message}"


# ---- the adapter --------------------------------------------------------------------------------


class PclusterCli:
    """One region's ``pcluster`` commands, each returning typed values or raising one line."""

    def __init__(self, install: Install, region: str, log_file: Path, env: Mapping[str, str] | None = None) -> None:
        self.install = install
        self.region = region
        self.log_file = log_file
        self._env = dict(os.environ if env is None else env)

    def _run(self, args: list[str], timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        env = {**self._env, "PCLUSTER_LOG_FILE": str(self.log_file), "AWS_DEFAULT_REGION": self.region}
        cmd = [self.install.exe, *args, "--region", self.region]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL, check=False
            )
        except subprocess.TimeoutExpired:
            raise PclusterError(f"pcluster {args[0]} did not answer in {timeout:.0f} s: see {self.log_file}") from None
        except OSError as exc:
            raise DdpctlError(f"cannot run {self.install.exe} ({exc}): {INSTALL_HINT}") from None
        try:
            doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {"value": doc}
        if not doc and proc.returncode != 0:
            # No JSON: pcluster died before answering (e.g. "AWS Credentials not found." goes to its log only).
            detail = (
                _last_error(self.log_file)
                or one_line(proc.stderr or proc.stdout, 300)
                or f"exit status {proc.returncode}"
            )
            if "Credentials not found" in detail or "Unable to locate credentials" in detail:
                doc = {"message": "Unable to locate credentials"}
            else:
                doc = {"message": detail}
        doc.setdefault("_exit_status", proc.returncode)
        return doc

    def version(self) -> str:
        return str(self._run(["version"]).get("version", ""))

    def create(self, name: str, config_path: Path, *, dryrun: bool, suppress: tuple[str, ...] = ()) -> CreateResult:
        """create-cluster; a refused configuration or an AWS error raises one line (dry run: ok=False)."""
        args = ["create-cluster", "--cluster-name", name, "--cluster-configuration", str(config_path)]
        if dryrun:
            args += ["--dryrun", "true"]
        if suppress:
            args += ["--suppress-validators", *suppress]
        doc = self._run(args, timeout=CREATE_TIMEOUT_S)
        errors, warnings = validation_findings(doc)
        message = one_line(doc.get("message", ""))
        if dryrun and message == DRYRUN_OK:
            return CreateResult(ok=True, message=message, warnings=tuple(warnings), doc=doc)
        if not dryrun and isinstance(doc.get("cluster"), dict):
            return CreateResult(
                ok=True, message=str(doc["cluster"].get("clusterStatus", "")), warnings=tuple(warnings), doc=doc
            )
        explained = explain(doc, "create-cluster" + (" --dryrun true" if dryrun else ""), self.region)
        if dryrun and errors:
            return CreateResult(ok=False, message=explained, warnings=tuple(warnings), doc=doc)
        raise PclusterError(explained)

    def describe(self, name: str) -> ClusterInfo | None:
        """describe-cluster; None when the cluster does not exist (deleted counts as gone)."""
        doc = self._run(["describe-cluster", "--cluster-name", name])
        if "clusterStatus" in doc:
            return ClusterInfo.from_json(doc)
        if NOT_FOUND_RE.search(str(doc.get("message", ""))):
            return None
        raise PclusterError(explain(doc, "describe-cluster", self.region))

    def delete(self, name: str) -> bool:
        """delete-cluster; False when there was nothing to delete."""
        doc = self._run(["delete-cluster", "--cluster-name", name])
        if isinstance(doc.get("cluster"), dict):
            return True
        if NOT_FOUND_RE.search(str(doc.get("message", ""))):
            return False
        raise PclusterError(explain(doc, "delete-cluster", self.region))

    def instances(self, name: str, node_type: str = "ComputeNode") -> list[ClusterInstance]:
        """describe-cluster-instances of one node type, every page (``nextToken``) of it. Instances
        that are not pending, running, stopping or stopped are not listed (ParallelCluster's filter)."""
        found: list[ClusterInstance] = []
        token, seen = "", set()
        for _ in range(MAX_PAGES):
            args = ["describe-cluster-instances", "--cluster-name", name, "--node-type", node_type]
            doc = self._run([*args, "--next-token", token] if token else args)
            if not isinstance(doc.get("instances"), list):
                raise PclusterError(explain(doc, "describe-cluster-instances", self.region))
            found += [ClusterInstance.from_json(i) for i in doc["instances"] if isinstance(i, dict)]
            token = str(doc.get("nextToken") or "")
            if not token or token in seen:
                return found
            seen.add(token)
        raise PclusterError(
            f"pcluster describe-cluster-instances gave more than {MAX_PAGES} pages for {name}: see {self.log_file}"
        )

    def compute_instances(self, name: str) -> list[ClusterInstance]:
        return self.instances(name, "ComputeNode")


def _last_error(log_file: Path) -> str:
    """The last ERROR line of pcluster's log (its message only), if any."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()[-200:]
    except OSError:
        return ""
    for line in reversed(lines):
        if " - ERROR - " in line and "!!" not in line:
            return one_line(line.split(" - ERROR - ", 1)[1].split(" - ", 1)[-1], 300)
    return ""


@contextmanager
def opened(install: Install, region: str, env: Mapping[str, str], log: Path | None = None) -> Iterator[PclusterCli]:
    """The CLI adapter, logging to ``log`` (the cluster dir), else to a temporary directory."""
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        yield PclusterCli(install, region, log, env)
        return
    with tempfile.TemporaryDirectory(prefix="ddpctl-pcluster-") as tmp:
        yield PclusterCli(install, region, Path(tmp) / "pcluster-cli.log", env)
