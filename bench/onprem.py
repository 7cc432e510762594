"""On-prem benchmarks on the network-namespace test cluster (root; see tests/support/testbed/).

    sudo .venv/bin/python -m bench.onprem [--repeat 3] [--wheel-dir DIR]     (from the repository's root)

1. playbooks/site.yml on 3 bare nodes: the first run against the second (no-op) run, as a ratio
   (goal: second <= 0.5x first). The first run is a real one for air-gapped nodes: it makes each
   node's venv and installs the pinned torch and torchvision from wheels the controller pushes
   (python_env_mode=wheels; the wheels are `pip download`ed here first, about 3 GB, unless
   --wheel-dir has them). Also reported: the same pair where the env already exists
   (python_env_mode=existing), which is everything but the install.
2. launch overhead over SSH: `ddpctl run message-passing --nodes 2` against the same torchrun
   commands (the plan's own shell lines) typed over plain `ssh`, in the same script (goal <= 1.1x).
3. `ddpctl check`'s all-reduce bus bandwidth node0<->node1 as a fraction of raw TCP throughput
   between the same two namespaces, measured in the same script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddpctl.infra.launch.plan import NodeLaunch
from tests.support import REPO
from tests.support.testbed.cluster import GROUP_VARS, Testbed, exclusive, testbed_down, testbed_up

VENV = str(Path(sys.executable).parent.parent)

TCP_SERVER = (
    "import socket,sys;s=socket.socket();s.bind((sys.argv[1],5299));s.listen(1);c,_=s.accept();n=0\n"
    "while True:\n d=c.recv(1<<20)\n if not d: break\n n+=len(d)\nprint(n)"
)
TCP_CLIENT = (
    "import socket,sys,time;c=socket.create_connection((sys.argv[1],5299));b=b'x'*(1<<20);t=time.perf_counter()\n"
    "for _ in range(int(sys.argv[2])): c.sendall(b)\nc.close();print(time.perf_counter()-t)"
)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def raw_tcp_gbps(tb: Testbed, megabytes: int = 512) -> float:
    server = subprocess.Popen(
        ["ssh", "-F", str(tb.ssh_config), "node1", f'python3 -c "{TCP_SERVER}" 10.77.0.11'],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    out = subprocess.run(
        ["ssh", "-F", str(tb.ssh_config), "node0", f'python3 -c "{TCP_CLIENT}" 10.77.0.11 {megabytes}'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    server.wait(timeout=30)
    return megabytes * 2**20 / float(out.strip()) / 1e9


def pinned() -> tuple[str, str]:
    """The torch and torchvision versions playbooks/roles/python_env pins."""
    text = (REPO / "playbooks" / "roles" / "python_env" / "defaults" / "main.yml").read_text()
    found = dict(re.findall(r'^python_env_(torch|torchvision)_version: "([^"]+)"', text, re.M))
    return found["torch"], found["torchvision"]


def site_first_and_second(tmp: Path, env: dict[str, str], name: str, **group_vars: str) -> tuple[float, float]:
    """site.yml twice on 3 bare nodes (a fresh test cluster)."""
    tb = testbed_up(3)
    inventory = tb.inventory(tmp / f"{name}.ini", **group_vars)
    playbook = [
        str(Path(VENV) / "bin" / "ansible-playbook"),
        "-i",
        str(inventory),
        str(REPO / "playbooks" / "site.yml"),
    ]
    return timed(playbook, env), timed(playbook, env)


def main() -> None:
    with exclusive():  # the test cluster is one per machine
        _main()


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--wheel-dir", type=Path, help="wheels of the pinned torch, torchvision and their dependencies")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ddpctl-bench-"))
    env = {
        **os.environ,
        "DDPCTL_HOME": str(tmp / "home"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    }
    wheels = args.wheel_dir or tmp / "wheels"
    if not args.wheel_dir:
        torch, vision = pinned()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "-d",
                str(wheels),
                f"torch=={torch}",
                f"torchvision=={vision}",
            ],
            check=True,
        )
    try:
        first, second = site_first_and_second(
            tmp,
            env,
            "wheels",
            python_env_mode="wheels",
            python_env_wheel_dir=str(wheels),
            python_env_path="{{ ddpctl_node_dir }}/venv",
        )
        print(
            f"site.yml on 3 bare nodes, installing torch from pushed wheels: first {first:.1f} s, "
            f"second (no-op) {second:.1f} s: {second / first:.2f}x"
        )
        first, second = site_first_and_second(tmp, env, "existing", **GROUP_VARS)
        print(
            f"site.yml on 3 nodes whose env exists: first {first:.1f} s, second (no-op) {second:.1f} s: "
            f"{second / first:.2f}x"
        )

        tb = testbed_up(3)
        inventory = tb.inventory(tmp / "hosts.ini", **GROUP_VARS)

        ddpctl = [sys.executable, "-m", "ddpctl"]
        subprocess.run(
            [*ddpctl, "up", "--provider", "onprem", "-i", str(inventory)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        tool, hand = [], []
        for i in range(args.repeat):
            tool.append(timed([*ddpctl, "run", "message-passing", "--nodes", "2"], env))
            dry = subprocess.run(
                [*ddpctl, "run", "message-passing", "--nodes", "2", "--dry-run", "--json", "--run-id", f"hand{i}"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            plan = json.loads(dry.stdout)["plan"]
            start = time.perf_counter()
            procs = []
            for node in plan["nodes"]:
                line = NodeLaunch(**{**node, "argv": tuple(node["argv"])}).shell()  # the same line
                procs.append(
                    subprocess.Popen(
                        ["ssh", "-F", str(tb.ssh_config), node["host"], line],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            assert all(p.wait() == 0 for p in procs)
            hand.append(time.perf_counter() - start)
        t, h = statistics.median(tool), statistics.median(hand)
        print(
            f"launch over SSH, message-passing on 2 nodes: by hand {h:.2f} s, ddpctl {t:.2f} s: {t / h:.2f}x "
            f"(median of {args.repeat})"
        )

        check = subprocess.run([*ddpctl, "check", "--json", "--size-mb", "64"], env=env, capture_output=True, text=True)
        links = {(b["a"], b["b"]): b["busbw_gbps"] for b in json.loads(check.stdout)["bandwidth"]}
        tcp = raw_tcp_gbps(tb)
        bw = links[("node0", "node1")]
        print(
            f"node0<->node1: raw TCP {tcp:.2f} GB/s, ddpctl check all-reduce busbw {bw:.2f} GB/s: {bw / tcp:.2f} of raw TCP"
        )
        subprocess.run([*ddpctl, "down"], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        testbed_down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
