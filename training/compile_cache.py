"""Compile once, warm everywhere: torch.compile's artifacts shared by the ranks, nodes and runs of a job,
and the choice whether compiling pays at all. Standard library and torch only (plain torchrun runs it).

The first rank to compile (global rank 0) saves torch's portable cache artifacts
(``torch.compiler.save_cache_artifacts()``, torch 2.7 on: inductor's compiled graphs with their Triton
kernels, AOTAutograd's joint graphs, autotuning and dynamic-shape decisions) to one file in the cache
folder, and broadcasts the bytes to every other rank, which loads them
(``torch.compiler.load_cache_artifacts``) and compiles warm: a node without a shared filesystem gets them
too, and a later run (or a node replacing a lost one) loads the file before compiling anything.
On a cold start the other ranks take their first step eagerly while rank 0 compiles (it waits for their
gradients anyway), then load rank 0's artifacts: the graphs are compiled once for the whole cluster.

The file's name holds a hash of what the compiled code depends on (torch, Triton and Python versions,
the GPU model or the CPU, the model's structure, the batch's shapes and dtypes, the precision, the compile
mode and DDP's graph split), so a run with another of these never loads it. The folder is
``$DDPCTL_COMPILE_CACHE_DIR`` where set; else the file is written to both
``$DDPCTL_SHARED_DIR/compile-cache`` (the cluster's shared folder, which ddpctl gives the ranks) and
``~/.cache/ddpctl/compile-cache`` on rank 0's node (which outlives a cluster whose shared folder goes with
it, such as the local clusters `ddpctl run` brings up for one run), and read from the first that has it. A torch without
the API shares nothing and says so in one line; where the cluster has a shared folder, inductor's and
Triton's own caches are pointed there instead (TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR, unless set).

On the CPU the artifacts hold inductor's generated C++ source, not the built libraries: a warm node
skips tracing and lowering, and still runs the C++ compiler once per kernel.
"""

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import sys

import torch
import torch.distributed as dist

#: the file names in the cache folder: torch-compile-<hash of key_parts>.bin
PREFIX = "torch-compile-"
#: first-step compile time, seconds, cold and with a warm cache (mingpt at the tutorial's shape on an
#: H200, issue 39: 21.8 s and 2.2 s), what choose_compile weighs against the steps' saving
COLD_COMPILE_S, WARM_COMPILE_S = 25.0, 3.0
#: what compiling saves of an eager step (mingpt on an H200: 1.60M against 1.29M tokens/s, about 20 %)
COMPILE_SAVING = 0.2
#: the MFU of an eager step, to turn a job's FLOPs per sample into a step time (mingpt on an H200: ~21 %)
EAGER_MFU = 0.2
#: an eager step's saving where the job gives no FLOPs (or the GPU's peak is unknown), seconds
DEFAULT_STEP_SAVING_S = 0.005


def has_artifacts_api():
    """Whether this torch has portable cache artifacts (2.7 on)."""
    return hasattr(torch.compiler, "save_cache_artifacts") and hasattr(torch.compiler, "load_cache_artifacts")


# ---- the choice: compile or not (pure) ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Choice:
    compile: bool
    reason: str

    def line(self):
        return f"compile: {'on' if self.compile else 'off'} ({self.reason})"


def step_saving_s(flops_per_step, peak_flops):
    """Seconds compiling saves per step, from the step's FLOPs and the GPU's peak where both are known."""
    if not flops_per_step or not peak_flops:
        return DEFAULT_STEP_SAVING_S
    return flops_per_step / (peak_flops * EAGER_MFU) * COMPILE_SAVING


def choose_compile(forced, *, device_type, steps, warm, saving_s=DEFAULT_STEP_SAVING_S):
    """Compile or not, and why in a few words (pure).

    forced: True/False from --compile/--no-compile (None: choose); steps: the optimizer steps this run
    will take; warm: a cache of this very model's compiled graphs was found. Compiling pays when the
    steps' saving (steps x saving_s) earns back the compile: ~COLD_COMPILE_S cold, ~WARM_COMPILE_S warm.
    On the CPU, off unless forced: inductor's C++ seldom earns its compile back in a training run.
    """
    if forced is not None:
        return Choice(bool(forced), "--compile" if forced else "--no-compile")
    if device_type != "cuda":
        return Choice(False, "on the CPU compiling seldom pays for training; --compile forces it")
    compile_s = WARM_COMPILE_S if warm else COLD_COMPILE_S
    earned = steps * saving_s
    what = f"a {steps:,}-step run saving ~{earned:.0f} s"
    if earned >= compile_s:
        cache = "warm cache found, " if warm else ""
        return Choice(True, f"{cache}{what} earns back a ~{compile_s:.0f} s compile")
    return Choice(False, f"{what} would not earn back a ~{compile_s:.0f} s compile; --compile forces it")


# ---- the key and the file (pure, but for reading versions) ---------------------------------------------


def _version(dist_name):
    try:
        return importlib.metadata.version(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def device_name(device):
    """The GPU model and compute capability, or the CPU's architecture."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} sm{''.join(map(str, torch.cuda.get_device_capability(device)))}"
    return f"cpu {platform.machine()}"


def sample_batch(dataset, batch_size):
    """Empty tensors with the shapes and dtypes of the dataset's batches (as default collation makes them)."""
    try:
        item = dataset[0]
        fields = [torch.as_tensor(t) for t in (item if isinstance(item, (tuple, list)) else (item,))]
    except (
        TypeError,
        ValueError,
        RuntimeError,
        IndexError,
        KeyError,
        NotImplementedError,
    ):  # not tensors (e.g. images before a transform): no shapes
        return ()
    return tuple(torch.empty((batch_size, *t.shape), dtype=t.dtype) for t in fields)


def key_parts(model, sample, device, **settings):
    """What compiled code depends on: another value of any of these must not load the artifacts (loading
    foreign ones would be harmless, inductor looks entries up by its own keys, but useless).

    sample: a batch (tensors, possibly nested in tuples/lists) with the shapes and dtypes of the steps';
    settings: the run's own (precision, compile mode, channels-last, DDP's graph split...).
    """
    shapes = [[list(t.shape), str(t.dtype)] for t in _tensors(sample)]
    params = [[n, list(p.shape), str(p.dtype)] for n, p in model.state_dict().items()]
    return {
        "torch": torch.__version__,
        "triton": _version("triton") or _version("pytorch-triton"),
        "python": ".".join(map(str, sys.version_info[:2])),
        "device": device_name(device),
        "model": hashlib.sha256(f"{model!r}\n{params}".encode()).hexdigest()[:16],
        "batch": shapes,
        "float32_matmul": torch.get_float32_matmul_precision(),
        **settings,
    }


def _tensors(sample):
    if isinstance(sample, torch.Tensor):
        return [sample]
    if isinstance(sample, (tuple, list)):
        return [t for item in sample for t in _tensors(item)]
    return []


def cache_key(parts):
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def cache_folders(env=None):
    """Where the artifacts are read (the first that has them) and written: [$DDPCTL_COMPILE_CACHE_DIR]
    where set, else [$DDPCTL_SHARED_DIR/compile-cache where set, ~/.cache/ddpctl/compile-cache]."""
    env = os.environ if env is None else env
    if env.get("DDPCTL_COMPILE_CACHE_DIR"):
        return [env["DDPCTL_COMPILE_CACHE_DIR"]]
    home = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    shared = [os.path.join(env["DDPCTL_SHARED_DIR"], "compile-cache")] if env.get("DDPCTL_SHARED_DIR") else []
    return [*shared, os.path.join(home, "ddpctl", "compile-cache")]


def artifact_path(folder, key):
    return os.path.join(folder, f"{PREFIX}{key}.bin")


def read_artifact(path):
    """The artifact's bytes, or None where there is none (or it cannot be read: then it is rebuilt)."""
    try:
        with open(path, "rb") as f:
            return f.read() or None
    except OSError:
        return None


def write_artifact(path, data):
    """Atomically: a reader (another node on a shared folder) sees no file or the whole one."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"  # same folder, so os.replace is an atomic rename
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def shared_inductor_env(env):
    """Without the artifacts API: inductor's and Triton's caches in the cluster's shared folder (where it
    has one and they are not set): the variables to set, possibly none."""
    shared = env.get("DDPCTL_SHARED_DIR")
    if not shared:
        return {}
    base = os.path.join(shared, "compile-cache", f"torch-{torch.__version__}")
    wanted = {
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(base, "inductor"),
        "TRITON_CACHE_DIR": os.path.join(base, "triton"),
    }
    return {k: v for k, v in wanted.items() if not env.get(k)}


# ---- the cache across ranks (collectives) ---------------------------------------------------------------


class CompileCache:
    """One job's compiled artifacts, shared across its ranks through rank 0 (collective methods: every rank
    calls them, in the same order)."""

    def __init__(self, key, folders, *, enabled=True):
        self.key, self.enabled = key, enabled and has_artifacts_api()
        self.paths = [artifact_path(folder, key) for folder in folders]
        self.path = self.paths[0]  # where the artifacts were found, else the first place they go
        self.rank = dist.get_rank()
        self.warm = False  # rank 0 found artifacts (and sent them to every rank): the same on all ranks
        self.said = ""

    @classmethod
    def for_model(cls, model, sample, device, folders=None, **settings):
        cache = cls(cache_key(key_parts(model, sample, device, **settings)), folders or cache_folders())
        if not cache.enabled:
            env = shared_inductor_env(os.environ)
            os.environ.update(env)
            where = f"inductor's cache in {env['TORCHINDUCTOR_CACHE_DIR']}" if env else "each node compiles for itself"
            cache.said = (
                f"compile cache: off (torch {torch.__version__} has no torch.compiler.save_cache_artifacts; {where})"
            )
        return cache

    def load(self):
        """Rank 0 reads the artifact and every rank loads it; return whether there was one."""
        if not self.enabled:
            return False
        box = [self._read() if self.rank == 0 else None]
        if dist.get_world_size() > 1:
            dist.broadcast_object_list(box, src=0)
        if box[0] is not None:
            self.warm = True
            self._load_bytes(box[0])
            self.said = f"compile cache: warm ({len(box[0]) / 1e6:.1f} MB of compiled artifacts from {self.path})"
        return self.warm

    def _read(self):
        """Rank 0: the artifacts from the first folder that has them, copied to those that lack them."""
        found = next(((path, data) for path in self.paths if (data := read_artifact(path)) is not None), None)
        if found is None:
            return None
        self.path, data = found
        for path in self.paths:
            if not os.path.exists(path):
                _write_or_say(path, data)
        return data

    def _load_bytes(self, data):
        """Into inductor's caches here; a damaged or foreign file is said, and compiled over (rank 0 then
        saves a good one: publish)."""
        try:
            loaded, why = torch.compiler.load_cache_artifacts(data) is not None, "not artifacts this torch reads"
        except Exception as e:
            loaded, why = False, f"{type(e).__name__}: {e}"
        if not loaded:
            print(f"compile cache: {self.path} not loaded ({why}); compiling cold", flush=True)

    def publish(self):
        """After rank 0's first compiled step: rank 0 saves its artifacts to the file (if it was cold) and
        sends them to the ranks that have not compiled yet, which load them. Return the bytes' size."""
        if not self.enabled:
            return 0
        if self.warm:  # rank 0 alone: it compiled graphs the file lacked (the code changed), keep them too
            if self.rank == 0 and _cache_misses():
                self._save()
            return 0
        box = [self._save() if self.rank == 0 else None]
        if dist.get_world_size() > 1:
            dist.broadcast_object_list(box, src=0)
        if self.rank != 0 and box[0]:
            self._load_bytes(box[0])
        return len(box[0] or b"")

    def _save(self):
        """Rank 0: its artifacts written to the file; return their bytes (None: nothing compiled)."""
        try:
            saved = torch.compiler.save_cache_artifacts()
        except Exception as e:  # never a crash of rank 0 while the others wait for its artifacts
            print(f"compile cache: nothing saved ({type(e).__name__}: {e})", flush=True)
            saved = None
        data = saved[0] if saved else None
        if data:
            saved = [path for path in self.paths if _write_or_say(path, data)]
            where = " and ".join(saved) or "nowhere"
            self.said = f"compile cache: saved {len(data) / 1e6:.1f} MB of compiled artifacts to {where}"
        return data


def _write_or_say(path, data):
    """Write the artifacts; a folder that cannot take them (read-only, full) is said, not fatal."""
    try:
        write_artifact(path, data)
        return True
    except OSError as e:
        print(f"compile cache: not saved to {path} ({e})", flush=True)
        return False


def _cache_misses():
    """Graphs inductor compiled afresh in this process (its counters; 0 where a torch has none)."""
    try:
        return torch._dynamo.utils.counters["inductor"].get("fxgraph_cache_miss", 0)
    except AttributeError:
        return 0
