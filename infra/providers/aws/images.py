"""Which image an AWS cluster's nodes boot, and what becomes of their NVIDIA driver: pure.

The Deep Learning AMI where its open NVIDIA driver drives the GPU, Canonical's Ubuntu where only
the proprietary driver does (site.yml's nvidia role installs it), the user's ``--ami`` always;
``ec2.Aws.find_image`` looks the newest one up, through SSM first.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...model.errors import UsageError
from . import pricing


@dataclass(frozen=True)
class ImageSource:
    """Where a default image comes from: an SSM public parameter first, else the newest image of
    ``owner`` whose name matches (the fallback where SSM does not answer, as in moto)."""

    label: str
    ssm_parameter: str  # "{arch}": the image's architecture as the publisher spells it
    owner: str
    name_patterns: tuple[str, ...]
    arch_names: tuple[tuple[str, str], ...] = ()  # EC2's architecture -> the publisher's, where they differ

    def arch(self, ec2_arch: str) -> str:
        return dict(self.arch_names).get(ec2_arch, ec2_arch)

    def parameter(self, ec2_arch: str) -> str:
        return self.ssm_parameter.format(arch=self.arch(ec2_arch))

    def patterns(self, ec2_arch: str) -> list[str]:
        return [p.format(arch=self.arch(ec2_arch)) for p in self.name_patterns]


#: The AWS Deep Learning AMI with NVIDIA's open kernel modules (Turing and newer GPUs).
DLAMI = ImageSource(
    label="the AWS Deep Learning AMI",
    ssm_parameter="/aws/service/deeplearning/ami/{arch}/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
    owner="amazon",
    name_patterns=(
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
        "Deep Learning OSS Nvidia Driver AMI GPU PyTorch * (Ubuntu 22.04) *",
    ),
)
#: Canonical's plain Ubuntu 22.04 LTS (no NVIDIA driver: the nvidia role installs one). 22.04 as
#: the Deep Learning AMI and ParallelCluster's image, so the playbooks meet one platform on AWS.
UBUNTU_OWNER = "099720109477"  # Canonical
UBUNTU = ImageSource(
    label="Canonical's Ubuntu 22.04",
    ssm_parameter="/aws/service/canonical/ubuntu/server/22.04/stable/current/{arch}/hvm/ebs-gp2/ami-id",
    owner=UBUNTU_OWNER,
    name_patterns=("ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-{arch}-server-*",),
    arch_names=(("x86_64", "amd64"),),
)

#: What the nvidia role of playbooks/site.yml installs by default (its defaults/main.yml; a test
#: keeps the two in step): the driver branch, and the CUDA runtime for GPUs that CUDA 13 supports
#: and for older ones (Maxwell, Pascal, Volta: CUDA 12.x; 12.6 as python_env's PyTorch wheels).
NVIDIA_DRIVER_BRANCH = "580"
NVIDIA_CUDA_VERSION = "13.0"
NVIDIA_LEGACY_GPU_CUDA_VERSION = "12.6"


@dataclass(frozen=True)
class ImageChoice:
    """Which image ``up`` looks for, why, and what the configure step does about the GPU driver."""

    source: ImageSource | None  # None: the user's --ami
    reason: str
    driver: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source.label if self.source else "--ami", "reason": self.reason, "driver": self.driver}


def driver_plan(gpu: pricing.Gpu | None, loaded: str = "") -> str:
    """What the nvidia role will choose on the nodes' GPUs (it decides there, from their PCI ids).
    ``loaded``: whose driver the image loads at boot, which the role keeps where it drives every GPU
    (``nvidia_keep_loaded_driver``) and installs over otherwise."""
    if gpu is not None and loaded:
        return f"{loaded}, loaded at boot: site.yml's nvidia role keeps it where it drives the GPUs; else " + (
            driver_plan(gpu).removeprefix("site.yml's nvidia role ")
        )
    if gpu is None:
        return "site.yml's nvidia role installs a driver only where it finds an NVIDIA GPU"
    if not gpu.open_modules:
        return (
            f"site.yml's nvidia role installs NVIDIA's proprietary {NVIDIA_DRIVER_BRANCH} driver "
            f"(cuda-drivers-{NVIDIA_DRIVER_BRANCH}) and CUDA {NVIDIA_LEGACY_GPU_CUDA_VERSION} ({NVIDIA_DRIVER_BRANCH} is "
            f"the last driver branch and CUDA 12 the last CUDA major for the {gpu.model}, {gpu.architecture})"
        )
    return (
        f"site.yml's nvidia role installs NVIDIA's {NVIDIA_DRIVER_BRANCH} driver with the open kernel modules "
        f"(nvidia-open-{NVIDIA_DRIVER_BRANCH}) and CUDA {NVIDIA_CUDA_VERSION} for the {gpu.model} ({gpu.architecture})"
    )


def choose_image(instance_type: str, ami: str) -> ImageChoice:
    """The image for ``instance_type``: the user's ``--ami``; else Canonical's Ubuntu where the Deep
    Learning AMI's open NVIDIA driver cannot drive the GPU (Volta and older); else the DLAMI."""
    gpu = pricing.gpu(instance_type)
    if ami:
        return ImageChoice(None, "--ami: your image", driver_plan(gpu, loaded="your image's driver, if it has one"))
    if gpu is not None and not gpu.current_driver:
        raise UsageError(
            f"{instance_type} has {gpu.model} GPUs ({gpu.architecture}), which no current NVIDIA driver "
            "supports: pick a newer type (--instance-type p3.2xlarge, g5.xlarge), or pass --ami with an image "
            "whose driver drives them"
        )
    if gpu is not None and not gpu.open_modules:
        reason = (
            f"the Deep Learning AMI's open NVIDIA driver cannot drive {instance_type}'s {gpu.model} "
            f"({gpu.architecture}), so plain Ubuntu and the proprietary driver"
        )
        return ImageChoice(UBUNTU, reason, driver_plan(gpu))
    if gpu is not None:
        reason = f"its open NVIDIA driver supports {instance_type}'s {gpu.model} ({gpu.architecture})"
        return ImageChoice(DLAMI, reason, driver_plan(gpu, loaded="the Deep Learning AMI's own driver"))
    return ImageChoice(DLAMI, "the default image", driver_plan(gpu))
