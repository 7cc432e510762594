"""A short compute burn on every GPU of this node at once: ``ddpctl check``'s health part runs it on
each node whose nvidia-smi lists GPUs (``infra/runs/health.py``), with the node's Python (it imports
torch), as ``python -c TEXT --seconds S``; by hand: ``python infra/node_programs/gpu_burn.py``.

One thread per GPU multiplies two square matrices (bf16 where the GPU has it, else fp32) over and
over for SECONDS, each waiting only for its own GPU, so a slow GPU does fewer; prints one line per
GPU, ``burn gpu=I tflops=X dtype=D name=NAME`` (I as CUDA numbers the GPUs this process sees; in
PCI bus order, as nvidia-smi numbers them, where CUDA_DEVICE_ORDER=PCI_BUS_ID). `ddpctl check`
compares the GPUs with each other. A GPU whose burn raised: ``burn failed gpu=I ERROR``. Without a
GPU torch can use: ``burn no-gpu REASON``. Exits 0 whatever it found: the verdict is `check`'s.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time


def burn(device, seconds, size, out):
    try:
        out[device] = timed(device, seconds, size)
    except Exception as exc:  # a sick GPU: said in its line, the others still measured
        out[device] = (None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200])


def timed(device, seconds, size):
    torch.cuda.set_device(device)
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):  # warm up: kernels chosen, clocks up
        torch.matmul(a, b)
    torch.cuda.synchronize(device)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(8):
            torch.matmul(a, b)
        torch.cuda.synchronize(device)
        done += 8
    elapsed = time.perf_counter() - start
    return 2 * size**3 * done / elapsed / 1e12, str(dtype).replace("torch.", "")


def main(argv=None):
    parser = argparse.ArgumentParser(description="a short matmul burn on every GPU at once")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=8192, help="matrix side")
    args = parser.parse_args(argv)
    global torch
    try:
        import torch
    except ImportError as exc:  # exit 0 all the same: the other nodes' burns go on
        print(f"burn no-gpu no torch ({exc})", flush=True)
        return 0
    if not torch.cuda.is_available():
        print(f"burn no-gpu torch {torch.__version__} sees no CUDA device", flush=True)
        return 0
    out = {}
    threads = [
        threading.Thread(target=burn, args=(d, args.seconds, args.size, out)) for d in range(torch.cuda.device_count())
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for device in range(torch.cuda.device_count()):
        tflops, said = out.get(device, (None, "no result"))
        if tflops is None:  # exit 0 all the same: `check` runs every node at once, and judges each
            print(f"burn failed gpu={device} {said}", flush=True)
        else:
            name = torch.cuda.get_device_name(device)
            print(f"burn gpu={device} tflops={tflops:.2f} dtype={said} name={name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
