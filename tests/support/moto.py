"""A moto server for the AWS tests: one per test session, on a loopback port (see tests/{unit,integration}/test_aws.py),
seeded with a realistic list of images; and the constants the AWS tests share.

The fixtures ``moto_server`` (the process) and ``moto`` (reset before each test) are in conftest.py,
so every test module shares one server; bench/aws_calls.py and `./dev twin up` start their own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REGION = "us-east-1"
#: The caller's address the AWS tests give `--ssh-cidr` (TEST-NET-3: never a real host).
SSH_CIDR = "203.0.113.7/32"
NEWEST_DLAMI = "ami-0c5e1b2f3a4d5e6f7"
NEWEST_UBUNTU = "ami-0f3a4b5c6d7e8f901"
DLAMI_OWNER = "898082745236"  # the owner of AWS's Deep Learning AMIs (moto aliases every seeded image "amazon")
CANONICAL = "099720109477"

# A realistic slice of what describe_images returns for Deep Learning AMIs and Canonical's Ubuntu
# images (MOTO_AMIS_PATH format): (id, name, creation date, owner).
AMIS = [
    (
        "ami-0a1b2c3d4e5f60718",
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20241115",
        "2024-11-15",
        DLAMI_OWNER,
    ),
    (
        "ami-0b2c3d4e5f6071829",
        "Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.5.1 (Ubuntu 22.04) 20250105",
        "2025-01-05",
        DLAMI_OWNER,
    ),
    (NEWEST_DLAMI, "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20250301", "2025-03-01", DLAMI_OWNER),
    # Canonical's naming, another owner, newer than Canonical's own: never picked
    (
        "ami-0d6f2a3b4c5d6e7f8",
        "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20250601",
        "2025-06-01",
        DLAMI_OWNER,
    ),
    (
        "ami-0e2f3a4b5c6d7e8f9",
        "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20250115",
        "2025-01-15",
        CANONICAL,
    ),
    (NEWEST_UBUNTU, "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20250516", "2025-05-16", CANONICAL),
    # a newer LTS of Canonical's: ddpctl stays on 22.04 (the Deep Learning AMI's and ParallelCluster's)
    (
        "ami-0a4b5c6d7e8f90a12",
        "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250610",
        "2025-06-10",
        CANONICAL,
    ),
]


def amis_json(path: Path) -> Path:
    """Write ``AMIS`` to ``path`` in the format moto reads from MOTO_AMIS_PATH."""
    common = {
        "public": True,
        "virtualization_type": "hvm",
        "architecture": "x86_64",
        "state": "available",
        "platform": None,
        "image_type": "machine",
        "hypervisor": "xen",
        "root_device_name": "/dev/sda1",
        "root_device_type": "ebs",
        "sriov": "simple",
    }
    images = [
        {
            "ami_id": ami,
            "name": name,
            "description": name,
            "creation_date": f"{date}T10:00:00.000Z",
            "owner_id": owner,
            **common,
        }
        for ami, name, date, owner in AMIS
    ]
    path.write_text(json.dumps(images))
    return path


class Moto:
    def __init__(self, url: str) -> None:
        self.url = url
        import boto3

        self.ec2 = boto3.session.Session(
            region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        ).client("ec2", endpoint_url=url)

    def post(self, path: str, body: bytes = b"") -> None:
        req = urllib.request.Request(self.url + path, data=body, method="POST", headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(req, timeout=10).read()

    def reset(self) -> None:
        self.post("/moto-api/reset")

    def env(self, home: Path, tmp: Path, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DDPCTL_FAULT"))}
        env.update(
            AWS_ENDPOINT_URL=self.url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION=REGION,
            AWS_EC2_METADATA_DISABLED="true",
            AWS_CONFIG_FILE=str(tmp / "no-aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(tmp / "no-aws-credentials"),
            DDPCTL_HOME=str(home),
            # Anything but the moto server would go to a closed loopback port, never outside.
            HTTP_PROXY="http://127.0.0.1:9",
            HTTPS_PROXY="http://127.0.0.1:9",
            NO_PROXY="127.0.0.1,localhost",
        )
        env.update(extra)
        return env

    def inventory(self) -> dict[str, set[str]]:
        """Every resource of every kind ddpctl might make (terminated instances are not billed)."""
        ec2 = self.ec2
        alive = [
            i
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        ]
        spot = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]
        return {
            "instances": {i["InstanceId"] for i in alive},
            "vpcs": {v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"]},
            "subnets": {s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]},
            "security_groups": {g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]},
            "internet_gateways": {g["InternetGatewayId"] for g in ec2.describe_internet_gateways()["InternetGateways"]},
            "route_tables": {t["RouteTableId"] for t in ec2.describe_route_tables()["RouteTables"]},
            "key_pairs": {k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]},
            "volumes": {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]},
            "network_interfaces": {
                n["NetworkInterfaceId"] for n in ec2.describe_network_interfaces()["NetworkInterfaces"]
            },
            "spot_requests": {r["SpotInstanceRequestId"] for r in spot if r["State"] in ("open", "active")},
        }

    def alive_instances(self) -> list[dict[str, Any]]:
        return [
            i
            for r in self.ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        ]


@contextmanager
def running_moto(tmp: Path) -> Iterator[Moto]:
    """moto_server as its own process on a free loopback port, stopped at the end."""
    exe = Path(sys.executable).with_name("moto_server")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["MOTO_AMIS_PATH"] = str(amis_json(tmp / "amis.json"))
    log = open(tmp / "moto.log", "wb")  # noqa: SIM115 - closed in the finalizer
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/data.json", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start: {(tmp / 'moto.log').read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield Moto(url)
    finally:
        proc.send_signal(signal.SIGTERM)  # by its own pid
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
