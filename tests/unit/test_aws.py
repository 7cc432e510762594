"""The AWS provider's pure parts: its plan, the EC2 requests it would send, prices, the instance
types' facts and the checks on its flags, with no server.

Its tests against a real EC2 API (moto in server mode) are in tests/integration/test_aws.py.
"""

from __future__ import annotations

import pytest

from tests.support import REPO
from tests.support.moto import CANONICAL, REGION, SSH_CIDR
from tests.support.specs import LAUNCH, cluster_spec

# ---- pure planning: no server ------------------------------------------------------------------


def p3_plan():
    from ddpctl.infra.providers.aws.plan import plan_from_spec

    spec = cluster_spec(
        name="c1",
        provider="aws",
        nodes=2,
        options={
            "region": REGION,
            "instance_type": "p3.2xlarge",
            "volume_gb": 200,
            "ssh_user": "ubuntu",
            "ssh_cidr": SSH_CIDR,
        },
    )
    return plan_from_spec(spec, "abc123", "/h/clusters/c1")


def p3_request() -> dict:
    from ddpctl.infra.providers.aws.ec2_requests import client_token, run_instances_request

    return run_instances_request(
        p3_plan(),
        ami="ami-1",
        root_device="/dev/sda1",
        subnet_id="subnet-1",
        group_id="sg-1",
        key_name="k",
        az="us-east-1a",
        count=2,
        placement_group="pg",
        client_token=client_token("abc123", "us-east-1a", 2),
    )


def test_the_plan_lists_every_step_planned_in_order_with_its_price() -> None:
    from ddpctl.infra.providers.aws.plan import STEPS

    plan = p3_plan()
    assert [r.kind for r in plan.resources()] == [k for k in STEPS if k != "configure"] + ["configure"]
    assert all(r.status == "planned" for r in plan.resources())
    assert plan.hourly_usd == pytest.approx(6.12)


def test_run_instances_launches_all_at_once_locked_down() -> None:
    req = p3_request()
    assert (req["MinCount"], req["MaxCount"]) == (2, 2)
    assert req["MetadataOptions"]["HttpTokens"] == "required" and req["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert req["BlockDeviceMappings"][0]["Ebs"] == {
        "VolumeSize": 200,
        "VolumeType": "gp3",
        "Encrypted": True,
        "DeleteOnTermination": True,
    }
    assert "IamInstanceProfile" not in req and "UserData" not in req  # no AWS credential reaches a node


def test_run_instances_tags_everything_and_its_token_fits() -> None:
    req = p3_request()
    tags = {t["Key"] for spec_ in req["TagSpecifications"] for t in spec_["Tags"]}
    assert {"ddpctl:cluster", "ddpctl:created-by", "Name"} <= tags
    assert len(req["ClientToken"]) <= 64


def test_ssh_only_from_the_caller_and_all_traffic_inside_the_group() -> None:
    from ddpctl.infra.providers.aws.ec2_requests import ingress_rules

    rules = ingress_rules(SSH_CIDR, "sg-1")
    assert rules[0]["IpRanges"][0]["CidrIp"] == SSH_CIDR and rules[1]["UserIdGroupPairs"][0]["GroupId"] == "sg-1"


def test_the_quota_and_the_placement_group_follow_the_instance_type() -> None:
    from ddpctl.infra.providers.aws import pricing
    from ddpctl.infra.providers.aws.plan import plan_from_spec

    assert pricing.vcpu_quota("p3.2xlarge", spot=False).code == "L-417A185B"
    assert p3_plan().placement_group
    assert not plan_from_spec(
        cluster_spec(name="c1", provider="aws", nodes=2, options={"instance_type": "t3.micro"}), "x", "/d"
    ).placement_group


def test_instance_profile_is_in_the_request_only_when_given() -> None:
    from dataclasses import replace

    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.providers.aws.ec2_requests import run_instances_request
    from ddpctl.infra.providers.aws.plan import plan_from_spec

    spec = cluster_spec(
        name="c1",
        provider="aws",
        nodes=2,
        options={
            "region": REGION,
            "instance_type": "p3.2xlarge",
            "volume_gb": 200,
            "iam_instance_profile": "ddpctl-s3",
        },
    )
    plan = plan_from_spec(spec, "abc123", "/h/clusters/c1")
    assert run_instances_request(plan, **LAUNCH)["IamInstanceProfile"] == {"Name": "ddpctl-s3"}
    assert any("IAM instance profile: ddpctl-s3" in line for line in plan.describe())
    assert "IamInstanceProfile" not in run_instances_request(replace(plan, iam_instance_profile=""), **LAUNCH)
    for provider in ("local", "pcluster"):
        with pytest.raises(UsageError, match=f"--iam-instance-profile is for --provider aws, not {provider}"):
            cluster_spec(name="c1", provider=provider, options={"iam_instance_profile": "ddpctl-s3"})
    with pytest.raises(UsageError, match="invalid --iam-instance-profile"):
        cluster_spec(name="c1", provider="aws", options={"iam_instance_profile": "arn:aws:iam::1:instance-profile/x y"})


def test_the_head_nodes_own_instance_profile_is_planned_and_said():
    """--head-instance-profile: not in the launch (one RunInstances makes every node, with the nodes'
    profile); the plan says it, aws only."""
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.providers.aws.ec2_requests import run_instances_request
    from ddpctl.infra.providers.aws.plan import plan_from_spec

    options = {"region": REGION, "iam_instance_profile": "ddpctl-s3", "head_instance_profile": "ddpctl-head"}
    plan = plan_from_spec(cluster_spec(name="c1", provider="aws", nodes=2, options=options), "abc123", "/h/c1")
    assert plan.head_instance_profile == "ddpctl-head"
    request = run_instances_request(plan, **LAUNCH)
    assert request["IamInstanceProfile"] == {"Name": "ddpctl-s3"}
    [line] = [line for line in plan.describe() if "head node's IAM instance profile" in line]
    assert "ddpctl-head" in line and "docs/aws-head-iam-policy.json" in line
    for provider in ("local", "onprem", "pcluster"):
        with pytest.raises(UsageError, match=f"--head-instance-profile is for --provider aws, not {provider}"):
            cluster_spec(name="c1", provider=provider, options={"head_instance_profile": "ddpctl-head"})
    with pytest.raises(UsageError, match="invalid --head-instance-profile"):
        cluster_spec(name="c1", provider="aws", options={"head_instance_profile": "two words"})


@pytest.mark.parametrize(
    "instance_type,source,modules",
    [
        ("p3.2xlarge", "Canonical's Ubuntu 22.04", "proprietary 580 driver (cuda-drivers-580) and CUDA 12.6"),
        ("p3.16xlarge", "Canonical's Ubuntu 22.04", "proprietary 580 driver (cuda-drivers-580) and CUDA 12.6"),
        ("p3dn.24xlarge", "Canonical's Ubuntu 22.04", "proprietary 580 driver (cuda-drivers-580) and CUDA 12.6"),
        ("g3.4xlarge", "Canonical's Ubuntu 22.04", "proprietary 580 driver (cuda-drivers-580) and CUDA 12.6"),
        ("g4dn.xlarge", "the AWS Deep Learning AMI", "open kernel modules (nvidia-open-580) and CUDA 13.0"),
        ("g5.xlarge", "the AWS Deep Learning AMI", "open kernel modules (nvidia-open-580) and CUDA 13.0"),
        ("p4d.24xlarge", "the AWS Deep Learning AMI", "open kernel modules (nvidia-open-580) and CUDA 13.0"),
        ("p5.48xlarge", "the AWS Deep Learning AMI", "open kernel modules (nvidia-open-580) and CUDA 13.0"),
        ("c5.xlarge", "the AWS Deep Learning AMI", "installs a driver only where it finds an NVIDIA GPU"),
    ],
)
def test_image_follows_the_gpu_generation(instance_type: str, source: str, modules: str) -> None:
    from ddpctl.infra.providers.aws.images import choose_image

    choice = choose_image(instance_type, ami="")
    assert choice.source is not None and choice.source.label == source
    assert modules in choice.driver
    dlami_gpu = source == "the AWS Deep Learning AMI" and not instance_type.startswith("c5")
    kept = "the Deep Learning AMI's own driver, loaded at boot: site.yml's nvidia role keeps it where it drives"
    assert choice.driver.startswith(kept) == dlami_gpu  # a loaded DLAMI driver is kept, and the dry run says so
    mine = choose_image(instance_type, ami="ami-0123456789abcdef0")
    assert mine.source is None and mine.reason == "--ami: your image"  # the user's image wins, whatever the type
    assert modules in mine.driver  # the nvidia role still decides from the GPU
    assert mine.driver.startswith("your image's driver, if it has one, loaded at boot: ") == (
        not instance_type.startswith("c5")
    )


def test_kepler_has_no_default_image() -> None:
    from ddpctl.infra.model.errors import UsageError
    from ddpctl.infra.providers.aws.images import choose_image

    with pytest.raises(UsageError, match=r"p2.xlarge has K80 GPUs \(Kepler\), which no current NVIDIA driver supports"):
        choose_image("p2.xlarge", ami="")
    assert choose_image("p2.xlarge", ami="ami-0123456789abcdef0").source is None  # your image, your driver


def test_image_sources_name_the_published_parameters() -> None:
    from ddpctl.infra.providers.aws.images import DLAMI, UBUNTU, UBUNTU_OWNER

    assert (
        UBUNTU.parameter("x86_64")
        == "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
    )
    assert (
        UBUNTU.parameter("arm64")
        == "/aws/service/canonical/ubuntu/server/22.04/stable/current/arm64/hvm/ebs-gp2/ami-id"
    )
    assert UBUNTU.patterns("x86_64") == ["ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"]
    assert UBUNTU.owner == UBUNTU_OWNER == CANONICAL
    assert DLAMI.parameter("x86_64") == (
        "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
    )


def test_the_ssm_parameter_is_asked_first() -> None:
    """Aws.find_image through SSM (which moto lacks): botocore's Stubber answers, no request leaves."""
    import boto3
    from botocore.stub import Stubber

    from ddpctl.infra.providers.aws.ec2 import Aws
    from ddpctl.infra.providers.aws.images import UBUNTU

    session = boto3.session.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    aws = Aws(REGION)
    ssm, ec2 = session.client("ssm"), session.client("ec2")
    aws._clients.update({"ssm": ssm, "ec2": ec2})
    name = UBUNTU.parameter("x86_64")
    image = {
        "ImageId": "ami-0123456789abcdef0",
        "Name": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-1",
        "Architecture": "x86_64",
        "OwnerId": CANONICAL,
    }
    with Stubber(ssm) as ssm_stub, Stubber(ec2) as ec2_stub:
        ssm_stub.add_response("get_parameter", {"Parameter": {"Name": name, "Value": image["ImageId"]}}, {"Name": name})
        ec2_stub.add_response("describe_images", {"Images": [image]}, {"ImageIds": [image["ImageId"]]})
        found, source = aws.find_image(UBUNTU, "x86_64")
        ssm_stub.assert_no_pending_responses()
    assert found == image and source == f"SSM {name}"


def test_the_plan_predicts_the_nvidia_roles_defaults() -> None:
    """What `up --dry-run` says the nvidia role installs is what the role's defaults say."""
    import yaml

    from ddpctl.infra.providers.aws import images as plan

    defaults = yaml.safe_load((REPO / "playbooks/roles/nvidia/defaults/main.yml").read_text())
    assert defaults["nvidia_driver_branch"] == plan.NVIDIA_DRIVER_BRANCH
    assert defaults["nvidia_cuda_version"] == plan.NVIDIA_CUDA_VERSION
    assert defaults["nvidia_legacy_gpu_cuda_version"] == plan.NVIDIA_LEGACY_GPU_CUDA_VERSION
    assert defaults["nvidia_kernel_modules"] == "auto"
    assert defaults["nvidia_driver_packages"] == {
        "open": "nvidia-open-{{ nvidia_driver_branch }}",
        "proprietary": "cuda-drivers-{{ nvidia_driver_branch }}",
    }


# ---- EFA where the instance type has it --------------------------------------------------------


def efa_plan(instance_type: str, efa_interfaces: int, *, private_ip: bool):
    from dataclasses import replace

    from ddpctl.infra.providers.aws.plan import plan_from_spec

    options = {"region": REGION, "instance_type": instance_type, "ssh_cidr": SSH_CIDR, "private_ip": private_ip}
    plan = plan_from_spec(cluster_spec(name="c1", provider="aws", nodes=2, options=options), "abc123", "/h/c1")
    return replace(plan, efa_interfaces=efa_interfaces)


def test_efa_interfaces_and_rules_are_pure_values() -> None:
    """One EFA per network card as AWS documents it (card 0 the primary, EFA with ENA; the others
    EFA-only at device index 1), only the primary where the nodes need a public address, and the
    group's egress to itself only with EFA."""
    from ddpctl.infra.providers.aws.ec2_requests import egress_rules, network_interfaces

    p4d = efa_plan("p4d.24xlarge", 4, private_ip=True)
    nics = network_interfaces(p4d, "subnet-1", "sg-1")
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics] == [
        (0, 0, "efa"),
        (1, 1, "efa-only"),
        (2, 1, "efa-only"),
        (3, 1, "efa-only"),
    ]
    assert all(n["Groups"] == ["sg-1"] and n["SubnetId"] == "subnet-1" and n["DeleteOnTermination"] for n in nics)
    assert not any("AssociatePublicIpAddress" in n for n in nics)  # EC2 refuses it with several interfaces
    assert egress_rules(p4d, "sg-1") == [
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-1", "Description": "ddpctl: EFA between the nodes"}]}
    ]
    public = efa_plan("p4d.24xlarge", 4, private_ip=False)
    (primary,) = network_interfaces(public, "subnet-1", "sg-1")
    assert primary["InterfaceType"] == "efa" and primary["AssociatePublicIpAddress"] is True
    assert "--private-ip, from inside the VPC, attaches all 4" in public.describe_efa()
    (plain,) = network_interfaces(efa_plan("g5.xlarge", 0, private_ip=False), "subnet-1", "sg-1")
    assert "InterfaceType" not in plain and "NetworkCardIndex" not in plain
    assert egress_rules(efa_plan("g5.xlarge", 0, private_ip=False), "sg-1") == []
    assert efa_plan("g5.xlarge", 0, private_ip=False).describe_efa() == (
        "  EFA per node: no EFA: g5.xlarge does not support it (NCCL uses TCP sockets)"
    )
