"""The Trainer's fast path: how it runs (SpeedConfig, every field a flag of the jobs), each auto setting decided
for the device (resolve_speed), and the training set kept on the device with batches gathered there
(DeviceBatches). Imported by trainer.py, which re-exports SpeedConfig for the jobs."""

import dataclasses

import torch
from torch.utils.data import TensorDataset

#: dense bf16/fp16 peak FLOP/s of one GPU, by a part of its name: MFU is reported on these
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12, "V100": 125e12}


@dataclasses.dataclass
class SpeedConfig:
    """How the Trainer runs; None means auto: on with CUDA, off on the CPU (except device_data)."""

    precision: str = dataclasses.field(default="auto", metadata={"choices": ("auto", "bf16", "fp16", "fp32")})
    # auto: bf16 autocast where the GPU has bf16 (A100, H100, L4...), fp16 autocast + GradScaler on older
    # GPUs (V100, T4), fp32 on the CPU
    compile: bool | None = dataclasses.field(
        default=None,
        metadata={"help": "default: auto (on with CUDA where the run is long enough to earn the compile back)"},
    )
    # torch.compile the model (the first step compiles: reported once; shared through compile_cache.py)
    cuda_graphs: bool = False  # compile with mode="reduce-overhead" (CUDA graphs): small, launch-bound models
    device_data: bool | None = dataclasses.field(
        default=None,
        metadata={"help": "default: auto (on where batches can be gathered by index; on a GPU, if the data fits)"},
    )
    # keep the training set on the device and gather each batch there
    channels_last: bool | None = None  # image batches (N, C, H, W) and the model in channels-last layout
    workers: int = 0  # DataLoader worker processes, when batches come from a DataLoader
    tf32: bool = True  # TF32 for the fp32 matmuls and convolutions left on GPUs that have it


def resolve_speed(speed, device, dataset=None):
    """A copy of speed with every auto setting decided for this device (and dataset)."""
    cuda = device.type == "cuda"
    s = dataclasses.replace(speed)
    if s.precision == "auto":
        s.precision = ("bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16") if cuda else "fp32"
    s.compile = (cuda if s.compile is None else s.compile) or s.cuda_graphs
    s.channels_last = cuda if s.channels_last is None else s.channels_last
    s.tf32 = s.tf32 and cuda
    size = device_nbytes(dataset)
    if size is None:  # batches can't be gathered by index: a DataLoader it is
        s.device_data = False
    elif s.device_data is None:  # on a GPU, only when it takes under a quarter of the free memory
        s.device_data = not cuda or size < 0.25 * torch.cuda.mem_get_info(device)[0]
    return s


def device_nbytes(dataset):
    """Bytes a device copy of the dataset takes; None where batches can't be gathered by index (DeviceBatches)."""
    if isinstance(dataset, TensorDataset):
        return sum(t.nbytes for t in dataset.tensors)
    if all(hasattr(dataset, a) for a in ("nbytes", "to", "gather")):
        return dataset.nbytes
    return None


class DeviceBatches:
    """Batches gathered by index from a copy of the dataset on the device: no worker processes, no per-sample
    Python, no host-to-device copies. The order is the sampler's (a DistributedSampler: this rank's shard,
    reshuffled by set_epoch), so a run sees exactly the batches a DataLoader over the same sampler gives.

    The dataset is a TensorDataset, or has `nbytes`, `to(device)` (a copy there) and `gather(indices)` (the
    collated batch for a 1-D index tensor on that device), as mingpt's CharDataset does.
    """

    def __init__(self, dataset, batch_size, sampler, device, drop_last=False):
        self.batch_size, self.sampler, self.device, self.drop_last = batch_size, sampler, device, drop_last
        if isinstance(dataset, TensorDataset):
            tensors = [t.to(device) for t in dataset.tensors]
            self.gather = lambda idx: tuple(t[idx] for t in tensors)
        else:
            self.gather = dataset.to(device).gather

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return -(-len(self.sampler) // self.batch_size)

    def __iter__(self):
        order = torch.tensor(list(self.sampler), dtype=torch.long).to(self.device)  # one copy per epoch
        for idx in order.split(self.batch_size)[: len(self)]:
            yield self.gather(idx)
