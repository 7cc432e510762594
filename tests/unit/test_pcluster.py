"""The ParallelCluster provider: its configuration, aws-parallelcluster's own schema, and the real
``pcluster`` CLI against the moto server.

``./dev test`` installs aws-parallelcluster into ``.venv-pcluster`` (its own venv: it pins older
attrs/packaging than ddpctl's) and exports ``DDPCTL_PCLUSTER``; Node.js comes with the system packages.

Exercised for real:
- the generated configuration loaded by aws-parallelcluster's ``ClusterSchema`` (offline, in its
  venv), and refused configurations reported as one line naming the field;
- ``pcluster`` against moto: describe-cluster/delete-cluster of a missing cluster (= gone),
  list-clusters, ``create-cluster --dryrun true`` with a moto VPC/subnet/key and a custom AMI;
- ``ddpctl up --provider pcluster``: the network and key pair (the aws provider's code), the final
  configuration file, then a real ``create-cluster``: validation, CDK synthesis with Node.js, the
  template upload to S3, CloudFormation CreateStack; moto's CloudFormation cannot run
  ParallelCluster's template (it answers "Template error: instance of Fn::GetAtt references
  undefined resource HeadNodeHealthAlarm...", and leaves the stack CREATE_IN_PROGRESS), so the
  test checks the one-line error, ``status`` of that stack, and that ``down`` deletes it with
  delete-cluster, waits until it is gone, and deletes the network and key pair;
- a crash after each of ddpctl's own steps, then ``down`` leaving nothing;
- ``describe-cluster-instances`` against moto (it finds instances by ParallelCluster's tags).

With recorded answers (the polling loops; describe-cluster and describe-cluster-instances in the
shapes the real CLI prints): CREATE_COMPLETE or a failure, compute nodes that start over a few
polls, that never start, or that ParallelCluster stops launching (PROTECTED), DELETE_FAILED; and,
through ``ddpctl up`` with a stand-in ``pcluster`` (STANDIN), a fleet that never starts, then
``down``. On the test cluster (node0 as the head node, node1 and node2 as compute nodes reachable
only through it): ``ddpctl check`` on the compute nodes, through the head node. tests/integration/test_slurm.py
has the head node's configure step and a job through sbatch.

Not exercised (no real AWS here): a cluster reaching CREATE_COMPLETE, compute nodes starting, and
a GPU job on such a cluster.

Two moto quirks are worked around through ddpctl's settings (never needed on AWS):
``DDPCTL_PCLUSTER_SUPPRESS_VALIDATORS`` skips the two launch-template validators (moto's dry-run
RunInstances wants an ``ebs`` parameter), and ``DDPCTL_PCLUSTER_S3_BUCKET`` gives a versioned bucket
(ParallelCluster's own bucket gets a TLS-only policy that moto enforces against plain http).
moto has no p3.2xlarge, so those tests use g5.xlarge.

Its tests that start processes (real parts) are in tests/integration/test_pcluster.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.moto import REGION, SSH_CIDR
from tests.support.pcluster import _instance, _plan, _resolved
from tests.support.specs import cluster_spec


def test_config_is_the_whole_document() -> None:
    config = _plan().config(_resolved())
    assert config == {
        "Region": "us-east-1",
        "Image": {"Os": "ubuntu2204"},
        "Imds": {"ImdsSupport": "v2.0"},
        "Tags": [
            {"Key": "ddpctl:cluster", "Value": "c1"},
            {"Key": "ddpctl:cluster-id", "Value": "abc123"},
        ],
        "HeadNode": {
            "InstanceType": "t3.large",
            "Networking": {"SubnetId": "subnet-0123456789abcdef0"},
            "Ssh": {"KeyName": "ddpctl-c1-abc123", "AllowedIps": SSH_CIDR},
            "Imds": {"Secured": True},
            "LocalStorage": {"RootVolume": {"Encrypted": True, "VolumeType": "gp3"}},
        },
        "Scheduling": {
            "Scheduler": "slurm",
            "SlurmQueues": [
                {
                    "Name": "gpu",
                    "CapacityType": "ONDEMAND",
                    "ComputeResources": [
                        {"Name": "p3-2xlarge", "InstanceType": "p3.2xlarge", "MinCount": 2, "MaxCount": 2}
                    ],
                    "ComputeSettings": {
                        "LocalStorage": {"RootVolume": {"Size": 200, "Encrypted": True, "VolumeType": "gp3"}}
                    },
                    "Networking": {"SubnetIds": ["subnet-0123456789abcdef0"], "PlacementGroup": {"Enabled": True}},
                }
            ],
        },
    }


def test_config_options() -> None:
    from ddpctl.infra.providers.pcluster.config import Settings, to_yaml

    settings = Settings(head_instance_type="c5.xlarge", shared_gb=100, custom_s3_bucket="my-bucket")
    config = _plan(nodes=1, spot=True, ami="ami-0123456789abcdef0", volume_gb=80, settings=settings).config(_resolved())
    assert config["Image"] == {"Os": "ubuntu2204", "CustomAmi": "ami-0123456789abcdef0"}
    assert config["CustomS3Bucket"] == "my-bucket" and config["HeadNode"]["InstanceType"] == "c5.xlarge"
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["CapacityType"] == "SPOT"
    assert "PlacementGroup" not in queue["Networking"]  # one node: no placement group
    assert queue["ComputeResources"][0]["MinCount"] == queue["ComputeResources"][0]["MaxCount"] == 1
    assert queue["ComputeSettings"]["LocalStorage"]["RootVolume"]["Size"] == 80
    assert config["SharedStorage"] == [
        {
            "Name": "shared",
            "StorageType": "Ebs",
            "MountDir": "/shared",
            "EbsSettings": {"VolumeType": "gp3", "Size": 100, "Encrypted": True, "DeletionPolicy": "Delete"},
        }
    ]
    text = to_yaml(config)
    assert text.startswith("# written by ddpctl") and text.index("Region:") < text.index("HeadNode:")
    import yaml

    assert yaml.safe_load(text) == config


def test_plan_reuses_the_aws_network_plan() -> None:
    plan = _plan()
    assert [r.kind for r in plan.resources()] == [
        "dir",
        "key-file",
        "key-pair",  # first in AWS: it holds the cluster's name in the region
        "vpc",
        "internet-gateway",
        "route",
        "subnet",
        "config",
        "cluster",
    ]
    assert plan.pcluster_name == "ddpctl-c1" and plan.aws.unique_name == "ddpctl-c1-abc123"
    assert plan.aws.key_pair_name == "ddpctl-c1"
    assert plan.hourly_usd == pytest.approx(2 * 3.06 + 0.0832)
    given = _plan(subnet_id="subnet-0123456789abcdef0")
    assert [r.kind for r in given.resources()] == ["dir", "key-file", "key-pair", "config", "cluster"]
    text = "\n".join(plan.describe())
    assert "2 x p3.2xlarge" in text and "SSH only from 203.0.113.7/32" in text and "$6.20/h" in text
    assert (
        "configure: playbooks/site.yml (common, python_env, nccl_env, bundle) on the head node, into /home/ubuntu/ddpctl"
        in text
    )
    assert "configure: skipped (--no-configure)" in "\n".join(_plan(configure=False).describe())
    cost = next(line for line in plan.describe() if line.startswith("  cost: "))
    elsewhere = "" if plan.region == "us-east-1" else f", not {plan.region}'s"
    assert cost == (  # dated, and which region's list it is (before: "us-east-1 list price", undated)
        f"  cost: $6.20/h: the us-east-1 on-demand list price of 2026-09-24, from ddpctl's table{elsewhere}, "
        "head node included"
    )


@pytest.mark.parametrize(
    "env,message",
    [
        ({"DDPCTL_PCLUSTER_SHARED_GB": "lots"}, "invalid DDPCTL_PCLUSTER_SHARED_GB='lots'"),
        ({"DDPCTL_PCLUSTER_SHARED_GB": "0"}, ""),
        ({"DDPCTL_PCLUSTER_S3_BUCKET": "Bad_Bucket"}, "invalid DDPCTL_PCLUSTER_S3_BUCKET='Bad_Bucket'"),
        (
            {"DDPCTL_PCLUSTER_SUPPRESS_VALIDATORS": "ALL nope"},
            "invalid DDPCTL_PCLUSTER_SUPPRESS_VALIDATORS item 'nope'",
        ),
        ({"DDPCTL_PCLUSTER_HEAD_INSTANCE_TYPE": "big"}, "invalid DDPCTL_PCLUSTER_HEAD_INSTANCE_TYPE='big'"),
    ],
)
def test_settings_from_env(env: dict[str, str], message: str) -> None:
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.providers.pcluster.config import settings_from_env

    if not message:
        assert settings_from_env(env).shared_gb == 0
        return
    with pytest.raises(UsageError) as exc:
        settings_from_env(env)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_pcluster_answers_as_typed_values_and_one_line_errors() -> None:
    from ddpctl.infra.providers.pcluster.cli import (
        ClusterInfo,
        explain,
        validation_findings,
    )
    from ddpctl.infra.providers.pcluster.config import flatten_errors

    info = ClusterInfo.from_json(
        {
            "clusterName": "ddpctl-c1",
            "clusterStatus": "CREATE_FAILED",
            "cloudFormationStackStatus": "ROLLBACK_COMPLETE",
            "computeFleetStatus": "UNKNOWN",
            "tags": [{"key": "ddpctl:cluster-id", "value": "abc123"}],
            "headNode": {
                "instanceId": "i-1",
                "state": "running",
                "publicIpAddress": "198.51.100.9",
                "privateIpAddress": "10.77.0.10",
                "instanceType": "t3.large",
            },
            "failures": [{"failureCode": "HeadNodeBootstrapFailure", "failureReason": "Cluster creation timed out."}],
        }
    )
    assert info.failed and info.head and info.head.public_ip == "198.51.100.9"
    assert info.tags == {"ddpctl:cluster-id": "abc123"}
    assert info.failures == ("HeadNodeBootstrapFailure: Cluster creation timed out.",)
    refused = {
        "message": "Invalid cluster configuration.",
        "configurationValidationErrors": [
            {"level": "WARNING", "type": "CustomAmiTagValidator", "message": "may not have been\ncreated by pcluster"},
            {
                "level": "ERROR",
                "type": "InstanceTypeValidator",
                "message": "The instance type 'p9.x' is not supported.",
            },
        ],
    }
    assert validation_findings(refused) == (
        ["InstanceTypeValidator: The instance type 'p9.x' is not supported."],
        ["CustomAmiTagValidator: may not have been created by pcluster"],
    )
    for doc, expected in [
        (refused, "ParallelCluster refused the configuration (create-cluster): InstanceTypeValidator"),
        ({"message": "Unable to locate credentials"}, "no AWS credentials found for pcluster: run `aws configure`"),
        ({"message": "Bad Request: invalid or unsupported region 'us-mars-1'"}, "does not support region 'us-east-1'"),
        ({"message": "<html>\n500\n</html>"}, "pcluster create-cluster failed in us-east-1: <html> 500 </html>"),
    ]:
        line = explain(doc, "create-cluster", REGION)
        assert expected in line and "\n" not in line
    assert flatten_errors(
        {
            "Scheduling": {
                "SlurmQueues": {"0": {"ComputeResources": {"0": {"MaxCount": ["Must be greater than or equal to 1."]}}}}
            },
            "Bogus": ["Unknown field."],
        }
    ) == [
        "Scheduling.SlurmQueues[0].ComputeResources[0].MaxCount: Must be greater than or equal to 1.",
        "Bogus: Unknown field.",
    ]


def test_interpreter_from_the_script(tmp_path: Path) -> None:
    from ddpctl.infra.providers.pcluster.cli import interpreter_of

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    python = venv / "python"
    python.write_text("")
    python.chmod(0o755)
    script = venv / "pcluster"
    script.write_text(f"#!{python}\nimport sys\n")
    assert interpreter_of(script) == str(python)
    script.write_text(f"#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\n")  # pip's form for long paths
    assert interpreter_of(script) == str(python)
    link = tmp_path / "pcluster"  # pipx: a link on PATH into the venv
    link.symlink_to(script)
    assert interpreter_of(link) == str(python)


class RecordedCli:
    """describe-cluster and describe-cluster-instances answers replayed in order, the last one
    repeating (shapes from pcluster's API model)."""

    def __init__(
        self, answers: list[dict[str, Any] | None], instances: list[list[dict[str, Any]]] | None = None
    ) -> None:
        self.answers = answers
        self.instances = instances or [[]]
        self.deleted = 0

    def describe(self, name: str):
        from ddpctl.infra.providers.pcluster.cli import ClusterInfo

        doc = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return None if doc is None else ClusterInfo.from_json({"clusterName": name, **doc})

    def compute_instances(self, name: str):
        from ddpctl.infra.providers.pcluster.cli import ClusterInstance

        docs = self.instances.pop(0) if len(self.instances) > 1 else self.instances[0]
        return [ClusterInstance.from_json(d) for d in docs]

    def delete(self, name: str) -> bool:
        self.deleted += 1
        return True


def _recorded_provider():
    from ddpctl.infra.providers.pcluster import PclusterProvider

    provider = PclusterProvider(env={})
    provider.poll_s = 0
    return provider


def test_polling_create_and_delete_with_recorded_answers() -> None:
    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.model.state import ClusterState

    provider, plan = _recorded_provider(), _plan()
    progress: list[str] = []
    mine = [{"key": "ddpctl:cluster-id", "value": "abc123"}]
    head = {"instanceId": "i-1", "privateIpAddress": "10.77.0.10", "state": "running"}
    cli = RecordedCli(
        [
            {"clusterStatus": "CREATE_IN_PROGRESS"},
            {"clusterStatus": "CREATE_IN_PROGRESS"},
            {"clusterStatus": "CREATE_COMPLETE", "headNode": head},
        ]
    )
    info = provider.wait_created(cli, plan, progress.append)
    assert info.head and info.head.private_ip == "10.77.0.10"
    assert progress == ["ddpctl-c1: CREATE_IN_PROGRESS (0 min; ParallelCluster takes 10-20)"]  # once per change

    failed = RecordedCli(
        [
            {
                "clusterStatus": "CREATE_FAILED",
                "cloudFormationStackStatus": "ROLLBACK_COMPLETE",
                "failures": [{"failureCode": "HeadNodeBootstrapFailure", "failureReason": "timed out"}],
            }
        ]
    )
    with pytest.raises(DdpctlError) as exc:
        provider.wait_created(failed, plan, progress.append)
    assert "CREATE_FAILED: HeadNodeBootstrapFailure: timed out" in str(exc.value) and "get-cluster-stack-events" in str(
        exc.value
    )

    state = ClusterState(spec=_spec(), cluster_id="abc123")
    deleting = RecordedCli(
        [
            {"clusterStatus": "CREATE_COMPLETE", "tags": mine},
            {"clusterStatus": "DELETE_IN_PROGRESS", "tags": mine},
            None,
        ]
    )
    assert provider._delete_cluster(deleting, plan, state, progress.append) is True and deleting.deleted == 1
    gone = RecordedCli([None])
    assert provider._delete_cluster(gone, plan, state, progress.append) is False and gone.deleted == 0
    foreign = RecordedCli(
        [{"clusterStatus": "CREATE_COMPLETE", "tags": [{"key": "ddpctl:cluster-id", "value": "zzz"}]}]
    )
    assert provider._delete_cluster(foreign, plan, state, progress.append) is False and foreign.deleted == 0
    assert "is not this cluster's" in progress[-1]
    stuck = RecordedCli(
        [{"clusterStatus": "DELETE_FAILED", "tags": mine, "failures": [{"failureReason": "ENI in use"}]}]
    )
    with pytest.raises(DdpctlError) as exc:
        provider._delete_cluster(stuck, plan, state, progress.append)
    assert "could not delete ddpctl-c1 (ENI in use)" in str(exc.value) and "ddpctl down --name c1" in str(exc.value)


def test_describe_cluster_instances_as_typed_values() -> None:
    from ddpctl.infra.providers.pcluster import compute
    from ddpctl.infra.providers.pcluster.cli import ClusterInstance

    node = ClusterInstance.from_json({**_instance("10.77.0.12"), "publicIpAddress": "198.51.100.7", "poolName": None})
    assert (node.instance_id, node.state, node.node_type, node.queue, node.private_ip, node.public_ip) == (
        _instance("10.77.0.12")["instanceId"],
        "running",
        "ComputeNode",
        "gpu",
        "10.77.0.12",
        "198.51.100.7",
    )
    fleet = [
        ClusterInstance.from_json(d)
        for d in (
            _instance("10.77.0.12"),
            _instance("10.77.0.9", "pending"),
            _instance("10.77.0.11"),
            _instance("10.77.0.13", queue="cpu"),
            _instance("10.77.0.10", node_type="HeadNode"),
        )
    ]
    assert [i.private_ip for i in compute.running(fleet)] == ["10.77.0.11", "10.77.0.12"]  # ddpctl's queue, by address
    assert compute.fleet_summary(fleet, 3) == "2 of 3 running (1 pending)"
    assert compute.fleet_summary([], 2) == "0 of 2 running"
    assert compute.node_name(fleet[2]) == "ip-10-77-0-11"
    scanned = "# 10.77.0.11:22 SSH-2.0-OpenSSH_9.2p1\n10.77.0.11 ssh-ed25519 AAAAC3one\n10.77.0.11 ecdsa-sha2-nistp256 AAAAE2two\n9.9.9.9 ssh-rsa AAAAB3x\n"
    assert compute.parse_keyscan(scanned, ["10.77.0.11", "10.77.0.12"]) == {
        "10.77.0.11": ["ssh-ed25519 AAAAC3one", "ecdsa-sha2-nistp256 AAAAE2two"],
        "10.77.0.12": [],
    }


def test_waiting_for_compute_nodes_with_recorded_answers() -> None:
    """A fleet that comes up over a few polls; one that never starts (one line: what to check, and
    `ddpctl down`); one ParallelCluster gave up on (PROTECTED); a cluster that fails meanwhile."""
    from ddpctl.infra.model.errors import DdpctlError

    provider, plan = _recorded_provider(), _plan()
    complete = {"clusterStatus": "CREATE_COMPLETE", "computeFleetStatus": "RUNNING"}
    a, b = "10.77.0.11", "10.77.0.12"
    progress: list[str] = []
    starting = RecordedCli(
        [complete],
        [
            [],
            [_instance(a, "pending"), _instance(b, "pending")],
            [_instance(a), _instance(b, "pending")],
            [_instance(a), _instance(b, "pending")],
            [_instance(b), _instance(a), _instance("10.77.0.13", queue="cpu")],
        ],
    )
    up = provider.wait_compute(starting, plan, progress.append)
    assert [i.private_ip for i in up] == [a, b]
    assert progress == [  # once per change, then the fleet as it is
        "ddpctl-c1: compute nodes 0 of 2 running (0 s; waiting up to 30 min)",
        "ddpctl-c1: compute nodes 0 of 2 running (2 pending) (0 s; waiting up to 30 min)",
        "ddpctl-c1: compute nodes 1 of 2 running (1 pending) (0 s; waiting up to 30 min)",
        "ddpctl-c1: compute nodes 2 of 2 running",
    ]

    provider.report_s = 0  # on a long wait with no change, a line every report_s all the same
    progress.clear()
    provider.wait_compute(
        RecordedCli([complete], [[_instance(a, "pending")]] * 3 + [[_instance(a), _instance(b)]]), plan, progress.append
    )
    assert progress.count("ddpctl-c1: compute nodes 0 of 2 running (1 pending) (0 s; waiting up to 30 min)") == 3

    provider.compute_timeout_s = 0.2
    never = RecordedCli([complete], [[_instance(a, "pending"), _instance(b, "pending")]])
    with pytest.raises(DdpctlError) as exc:
        provider.wait_compute(never, plan, progress.append)
    line = str(exc.value)
    assert line == (
        "the compute nodes of ddpctl-c1 did not all start in 0 s (0 of 2 running (2 pending)): check the vCPU quota "
        "'Running On-Demand P instances' (L-417A185B) in us-east-1, capacity for p3.2xlarge in the subnet's zone, and "
        "/var/log/parallelcluster/clustermgtd and slurm_resume.log on the head node; the cluster is billed until "
        "`ddpctl down --name c1` deletes it"
    )
    spot = _plan(spot=True)
    with pytest.raises(DdpctlError) as exc:
        provider.wait_compute(RecordedCli([complete], [[]]), spot, progress.append)
    assert "'All P Spot Instance Requests' (L-7212CCBC)" in str(exc.value) and "Spot capacity for p3.2xlarge" in str(
        exc.value
    )

    protected = RecordedCli([{**complete, "computeFleetStatus": "PROTECTED"}], [[_instance(a, "pending")]])
    with pytest.raises(DdpctlError) as exc:
        provider.wait_compute(protected, plan, progress.append)
    assert str(exc.value).startswith(
        "ParallelCluster stopped launching the compute nodes of ddpctl-c1 (compute fleet PROTECTED"
    )
    assert "`ddpctl down --name c1` deletes the cluster" in str(exc.value)
    failed = RecordedCli([{"clusterStatus": "UPDATE_FAILED", "failures": [{"failureReason": "boom"}]}], [[]])
    with pytest.raises(DdpctlError) as exc:
        provider.wait_compute(failed, plan, progress.append)
    assert "ddpctl-c1 failed while its compute nodes started (boom)" in str(exc.value)
    for bad in ("soon", "-1", "inf"):
        with pytest.raises(Exception) as exc:
            type(provider)(env={"DDPCTL_PCLUSTER_POLL_S": bad}).poll()
        assert str(exc.value).startswith(f"DDPCTL_PCLUSTER_POLL_S={bad} is not a number of seconds")


def test_the_waits_are_the_activity_going_on() -> None:
    """Each wait is what a terminal shows live with its time (``infra/model/progress.py``), its status in
    brackets (the same step while only that moves), and over when the wait ends."""
    from ddpctl.infra.model.state import ClusterState
    from tests.support.progress import Recorder

    provider, plan, progress = _recorded_provider(), _plan(), Recorder()
    head = {"instanceId": "i-1", "privateIpAddress": "10.77.0.10", "state": "running"}
    created = [{"clusterStatus": "CREATE_IN_PROGRESS"}, {"clusterStatus": "CREATE_COMPLETE", "headNode": head}]
    provider.wait_created(RecordedCli(created), plan, progress)
    complete = {"clusterStatus": "CREATE_COMPLETE", "computeFleetStatus": "RUNNING"}
    fleet = [[_instance("10.77.0.11", "pending")], [_instance("10.77.0.11"), _instance("10.77.0.12")]]
    provider.wait_compute(RecordedCli([complete], fleet), plan, progress)
    mine = [{"key": "ddpctl:cluster-id", "value": "abc123"}]
    deleting = RecordedCli([{"clusterStatus": "DELETE_IN_PROGRESS", "tags": mine}] * 2 + [None])
    provider._delete_cluster(deleting, plan, ClusterState(spec=_spec(), cluster_id="abc123"), progress)
    assert progress.activities == [
        "waiting for ParallelCluster to create ddpctl-c1 (CREATE_IN_PROGRESS)",
        None,
        "waiting for the compute nodes of ddpctl-c1 (0 of 2 running (1 pending))",
        None,
        "waiting for ParallelCluster to delete ddpctl-c1 (DELETE_IN_PROGRESS)",
        None,
    ]


def _spec():

    return cluster_spec(name="c1", provider="pcluster", nodes=2, options={"region": REGION})


def test_head_node_playbook_vars() -> None:
    """What the head node's site.yml run gets: everything in the home ParallelCluster shares, CUDA
    wheels for the compute nodes (not the head node's own choice), no per-node interface."""
    from ddpctl.infra.providers.pcluster.plan import HEAD_TAGS

    plan = _plan()  # p3.2xlarge: V100
    assert plan.head_playbook_vars() == {
        "ddpctl_node_dir": "/home/ubuntu/ddpctl",
        "ddpctl_run_user": "ubuntu",
        "common_set_hostname": False,
        "common_manage_hosts": False,
        "common_packages_update_cache": True,
        "nvidia_gpu_present": True,
        "python_env_cuda_version": "12.6",
        "nccl_env_pin_interface": False,
    }  # 12.6: the newest CUDA whose PyTorch wheels have V100 (Volta) kernels
    assert _plan(instance_type="p5.48xlarge").head_playbook_vars()["python_env_cuda_version"] == "12.8"  # H100
    # what python_env makes of these on a head node without a GPU: test_playbooks' cuda-wheels test
    assert set(HEAD_TAGS.split(",")) == {"common", "python_env", "nccl_env", "bundle"}
