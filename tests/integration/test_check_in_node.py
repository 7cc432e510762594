"""`ddpctl check` inside a node (issue 37), on real local runs: a one-node cluster says plainly that
there are no links between nodes to test, and with 2 or more GPUs on a node its in-node all-reduce
is measured, one rank per GPU. The GPUs are a stand-in nvidia-smi (tests/support/local_gpus.py): the
ranks see the CUDA_VISIBLE_DEVICES of their node's share but no GPU, so the in-node all-reduce runs
on gloo on the CPU, the stand-in for NCCL over NVLink; the figure is real, its speed is the CPU's."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import ddpctl
from tests.support.local_gpus import machine

ONE_NODE = "one node (node0): no links between nodes to test (reachability and pair bandwidth need 2 or more)"


def test_one_node_with_two_gpus_measures_inside_it_and_says_what_it_did_not(home: Path, tmp_path: Path) -> None:
    env = machine(tmp_path, 2)
    assert ddpctl("up", "--nodes", "1", env=env).returncode == 0
    try:
        as_json = ddpctl("check", "--json", "--size-mb", "4", env=env, timeout=300)
        text = ddpctl("check", "--size-mb", "4", env=env, timeout=300)
    finally:
        assert ddpctl("down", env=env).returncode == 0
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["reachability"] == [] and doc["bandwidth"] == []
    [inside] = doc["in_node"]
    assert (inside["node"], inside["ranks"], inside["backend"]) == ("node0", 2, "gloo") and inside["busbw_gbps"] > 0
    assert doc["notes"] == [ONE_NODE]
    assert text.returncode == 0, text.stderr
    assert "links of" not in text.stdout + text.stderr  # no empty links table
    assert "inside the nodes of 'default'" in text.stdout and "gloo (no GPU used: CPU)" in text.stdout, text.stdout
    assert ONE_NODE in text.stderr, text.stderr


def test_one_node_without_gpus_says_it_measured_nothing(home: Path, tmp_path: Path) -> None:
    env = machine(tmp_path, None)
    assert ddpctl("up", "--nodes", "1", env=env).returncode == 0
    try:
        result = ddpctl("check", env=env, timeout=300)
    finally:
        assert ddpctl("down", env=env).returncode == 0
    assert result.returncode == 0, result.stderr
    assert "links of" not in result.stdout + result.stderr
    assert ONE_NODE in result.stderr
    assert "no in-node all-reduce measured: no node has 2 or more GPUs (0 GPU(s) counted at up/configure)" in (
        result.stderr
    )


def test_two_nodes_of_two_gpus_each_links_and_insides(home: Path, tmp_path: Path) -> None:
    env = machine(tmp_path, 4)
    assert ddpctl("up", "--nodes", "2", env=env).returncode == 0
    try:
        result = ddpctl("check", "--json", "--size-mb", "4", env=env, timeout=300)
    finally:
        assert ddpctl("down", env=env).returncode == 0
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(b["a"], b["b"]) for b in doc["bandwidth"]] == [("node0", "node1")]
    assert [(i["node"], i["ranks"]) for i in doc["in_node"]] == [("node0", 2), ("node1", 2)]
    assert doc["notes"] == []
