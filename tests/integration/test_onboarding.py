"""A first-time user's path: a plan before an AWS account, help texts that agree with it, install
hints that work for how ddpctl was installed, and `./dev demo` saying how to reach `ddpctl`.
Its pure tests (no process beyond Python) are in tests/unit/test_onboarding.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddpctl.infra.providers.aws import images, pricing
from tests.support import REPO
from tests.support.cli import ddpctl


@pytest.fixture
def no_aws(tmp_path: Path) -> dict[str, str]:
    """No credentials anywhere: no AWS_* variables, empty config and credentials files, no
    instance metadata, and any network call would go to a closed loopback port."""
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DDPCTL_"))}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        DDPCTL_HOME=str(tmp_path / "home"),
        HOME=str(tmp_path),
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
    )
    return env


def test_a_dry_run_with_no_aws_account_shows_the_plan_and_what_it_could_not_check(no_aws, tmp_path: Path):
    result = ddpctl("up", "--provider", "aws", "--nodes", "2", "--dry-run", env=no_aws, timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "2 x p3.2xlarge" in out
    assert f"AMI: {images.UBUNTU.label}" in out  # the image choice for p3
    assert "GPU driver: site.yml's nvidia role installs NVIDIA's proprietary 580 driver" in out
    assert f"cost: $6.12/h: the us-east-1 on-demand list price of {pricing.PRICES_AS_OF}, from ddpctl's table" in out
    assert "about $147 a day until `ddpctl down`" in out
    not_checked = out.split("Not checked (no AWS credentials found", 1)[1]
    assert "vCPU quota L-417A185B (Running On-Demand P instances) in us-east-1" in not_checked
    assert "needs 2 x 8 = 16 vCPUs" in not_checked
    assert "the zones that offer it" in not_checked
    assert "the EC2 DryRun calls: CreateVpc, CreateInternetGateway, CreateSecurityGroup" in not_checked
    assert "the on-demand price of p3.2xlarge in us-east-1 (the AWS Price List API)" in not_checked
    assert "Nothing was created." in out
    assert not (tmp_path / "home" / "clusters").exists() or not any((tmp_path / "home" / "clusters").iterdir())


def test_without_an_account_up_is_one_line_that_points_at_the_dry_run(no_aws, tmp_path: Path):
    result = ddpctl("up", "--provider", "aws", "--yes", env=no_aws, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no AWS credentials found"), result.stderr
    assert "`up --dry-run` shows the plan and its cost without them" in lines[0]
    assert not list((tmp_path / "home").glob("clusters/*.json"))  # nothing recorded


def test_the_no_account_dry_run_as_json(no_aws):
    result = ddpctl("up", "--provider", "aws", "--instance-type", "g5.xlarge", "--dry-run", "--json", env=no_aws)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)["aws"]
    assert doc["image"]["source"] == images.DLAMI.label
    assert doc["plan"]["hourly_usd"] == pricing.ON_DEMAND_USD_PER_HOUR["g5.xlarge"]
    assert set(doc["checks"]) == {
        "CreateVpc",
        "CreateInternetGateway",
        "CreateSecurityGroup",
        "ImportKeyPair",
        "RunInstances",
    }
    assert all(v.startswith("not checked") for v in doc["checks"].values())
    assert any("L-DB2E81BA" in line for line in doc["not_checked"])  # G instances' quota


def test_up_help_the_ami_help_and_the_dry_run_agree_on_p3s_image(no_aws):
    """The truth is images.choose_image: Canonical's Ubuntu and NVIDIA's driver for p3 (Volta)."""
    assert images.choose_image("p3.2xlarge", "").source is images.UBUNTU
    assert images.choose_image("g5.xlarge", "").source is images.DLAMI
    helptext = " ".join(ddpctl("up", "--help", env=no_aws).stdout.split())
    assert "p3.2xlarge, Deep Learning AMI" not in helptext
    assert "Canonical's Ubuntu 22.04 and NVIDIA's driver from site.yml for p3 (V100)" in helptext
    assert "the Deep Learning AMI for g4dn, g5, p4d, p5" in helptext
    assert "Canonical's Ubuntu 22.04 for p3 (Volta)" in helptext  # --ami's default
    dry = ddpctl("up", "--provider", "aws", "--dry-run", env=no_aws).stdout
    assert f"AMI: {images.UBUNTU.label}" in dry


def test_this_checkouts_hint_is_its_editable_install(no_aws, tmp_path: Path):
    """The test venv has ddpctl installed editable from this checkout (./dev setup): a --python
    without torch is told the command that adds torch to it, from this checkout."""
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    result = ddpctl("run", "mnist", "--nodes", "1", "--python", str(fake), env=no_aws, cwd=tmp_path)
    assert result.returncode == 2
    assert f"run `{fake} -m pip install -e '{REPO}[train]'`" in result.stderr, result.stderr
    assert "'ddpctl[train]'`" not in result.stderr
