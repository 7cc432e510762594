"""Every GPU of the local machine (issue 37): local nodes split the GPUs `nvidia-smi -L` lists between
them through CUDA_VISIBLE_DEVICES, on real local runs. The GPUs are a stand-in `nvidia-smi` first on
PATH (as the test cluster's nodes have); the ranks run on the CPU here and print what they were given.
The split's arithmetic: tests/unit/test_local_gpus.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import ddpctl
from tests.support.local_gpus import machine

SHOW = (
    "import os\n"
    "print('visible', os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'), 'local_rank', os.environ['LOCAL_RANK'],"
    " 'order', os.environ.get('CUDA_DEVICE_ORDER', '<unset>'), flush=True)\n"
)
SEEN = re.compile(r"^\[(node\d) r(\d+)\] visible (\S+) local_rank (\d) order (\S+)$", re.MULTILINE)


def seen(stdout: str) -> dict[str, list[tuple[str, str]]]:
    """Each node's (CUDA_VISIBLE_DEVICES, LOCAL_RANK) pairs, in local-rank order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for node, _, visible, local_rank, order in SEEN.findall(stdout):
        assert order == "PCI_BUS_ID"  # numbered as nvidia-smi numbers them
        out.setdefault(node, []).append((visible, local_rank))
    return {node: sorted(pairs, key=lambda p: p[1]) for node, pairs in out.items()}


def test_two_local_nodes_split_four_gpus_two_each(home: Path, tmp_path: Path) -> None:
    env = machine(tmp_path, 4)
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    up = ddpctl("up", "--nodes", "2", "--json", env=env)
    assert up.returncode == 0, up.stderr
    nodes = json.loads(up.stdout)["cluster"]["nodes"]
    assert [(n["gpus"], n["devices"]) for n in nodes] == [(2, "0,1"), (2, "2,3")]
    try:
        for nproc in ((), ("--nproc-per-node", "gpu")):  # the default for GPU nodes, and `gpu`
            run = ddpctl("run", str(script), *nproc, env=env, timeout=300)
            assert run.returncode == 0, run.stdout + run.stderr
            assert "all 2 node(s) of cluster 'default', 2+2 process(es)" in run.stderr, run.stderr
            assert seen(run.stdout) == {
                "node0": [("0,1", "0"), ("0,1", "1")],
                "node1": [("2,3", "0"), ("2,3", "1")],
            }, run.stdout
    finally:
        down = ddpctl("down", env=env)
    assert down.returncode == 0, down.stderr


def test_an_uneven_split_gives_the_first_nodes_one_more(home: Path, tmp_path: Path) -> None:
    """3 GPUs on 2 nodes: node0 GPUs 0,1, node1 GPU 2; a run brought up for itself, for real."""
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    run = ddpctl("run", str(script), "--nodes", "2", env=machine(tmp_path, 3), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2+1 process(es) (one per GPU)" in run.stderr, run.stderr
    assert seen(run.stdout) == {"node0": [("0,1", "0"), ("0,1", "1")], "node1": [("2", "0")]}, run.stdout


def test_more_local_nodes_than_gpus_is_one_line(home: Path, tmp_path: Path) -> None:
    run = ddpctl("run", "message-passing", "--nodes", "3", env=machine(tmp_path, 2))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "Error: 3 local node(s) but this machine has 2 GPU(s) (nvidia-smi -L), and each local node gets GPUs of its "
        "own: use --nodes 2 or fewer (--nproc-per-node runs more ranks on a node), or run every node on the CPU with "
        "CUDA_VISIBLE_DEVICES= set (empty) for ddpctl"
    ]
    assert not (home / "clusters" / "default.json").exists()


@pytest.mark.parametrize(
    ("gpus", "extra", "why"),
    [
        (None, {}, "no nvidia-smi"),
        (-1, {}, "nvidia-smi fails"),
        (2, {"CUDA_VISIBLE_DEVICES": ""}, "the GPUs hidden from ddpctl"),
    ],
)
def test_no_gpus_counted_is_cpu_nodes(home: Path, tmp_path: Path, gpus: int | None, extra: dict, why: str) -> None:
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    run = ddpctl("run", str(script), "--nodes", "3", env=machine(tmp_path, gpus, **extra), timeout=300)
    assert run.returncode == 0, why + run.stdout + run.stderr
    assert "1+1+1 process(es) (1 on a node without GPUs)" in run.stderr, why + run.stderr
    expected = "<unset>" if gpus != 2 else ""
    found = {node: [v for v, _ in pairs] for node, pairs in seen_any(run.stdout).items()}
    assert found == {f"node{i}": [expected] for i in range(3)}, why + run.stdout


def seen_any(stdout: str) -> dict[str, list[tuple[str, str]]]:
    """As ``seen``, for ranks given no devices of their own (no CUDA_DEVICE_ORDER either)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for node, visible, local_rank, order in re.findall(
        r"^\[(node\d) r\d+\] visible (\S*) ?local_rank (\d) order (\S+)$", stdout, re.MULTILINE
    ):
        assert order == "<unset>"
        out.setdefault(node, []).append((visible, local_rank))
    return out


def test_callers_cuda_visible_devices_narrows_the_split(home: Path, tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES=1,3 for ddpctl on a 4-GPU machine: two nodes get GPU 1 and GPU 3 (a plan)."""
    dry = ddpctl(
        "run", "message-passing", "--nodes", "2", "--dry-run", env=machine(tmp_path, 4, CUDA_VISIBLE_DEVICES="1,3")
    )
    assert dry.returncode == 0, dry.stderr
    assert re.findall(r"env:  CUDA_VISIBLE_DEVICES=(\S+)", dry.stdout) == ["1", "3"], dry.stdout
    assert re.findall(r"node       (node\d) at .*, GPUs (\S+)$", dry.stdout, re.MULTILINE) == [
        ("node0", "1"),
        ("node1", "3"),
    ], dry.stdout


def test_more_ranks_than_gpus_is_refused_before_anything_starts(home: Path, tmp_path: Path) -> None:
    """Ranks and GPUs agree: 4 processes on a local node with 1 GPU is one line, exit 2, nothing
    started or recorded; the same run with the GPUs hidden (-e CUDA_VISIBLE_DEVICES=, a CPU job) runs."""
    env = machine(tmp_path, 1)
    refused = ddpctl("run", "message-passing", "--nproc-per-node", "4", env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "Error: 4 process(es) on node node0 of cluster 'default', which has 1 GPU(s) (counted at up/configure): "
        "each rank of a GPU job needs a GPU of its own: give --nproc-per-node 1 or fewer, or "
        "-e CUDA_VISIBLE_DEVICES= (empty) for ranks that use no GPU"
    ]
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    assert not (home / "clusters" / "default.json").exists()
    cpu = ddpctl("run", "message-passing", "--nproc-per-node", "4", "-e", "CUDA_VISIBLE_DEVICES=", env=env, timeout=300)
    assert cpu.returncode == 0, cpu.stdout + cpu.stderr
    assert cpu.stdout.count("all_reduce OK (10.0 == 10.0)") == 4, cpu.stdout
