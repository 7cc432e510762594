"""`ddpctl logs` and `ddpctl ssh` (issue 15): a run's output read back from its record, filtered
and followed, on real local runs; the ssh command line built from a node's SSH details (run over
SSH on the test cluster in tests/integration/test_onprem.py).

Its tests that start processes (real parts) are in tests/integration/test_access.py.
"""

from __future__ import annotations

import pytest

from ddpctl.infra.hosts.connections import ssh_argv
from ddpctl.infra.hosts.ssh_options import parse_g
from ddpctl.infra.model.host import Host
from ddpctl.infra.runs.logs import LogFilter, LogLine, parse


def test_log_lines_parse_back() -> None:
    assert parse("[node1 r3] loss 0.5 [x]\n") == LogLine("node1", 3, "loss 0.5 [x]")
    assert parse("[node0] W1124 agent line") == LogLine("node0", None, "W1124 agent line")
    assert parse("not ddpctl's") == LogLine("?", None, "not ddpctl's")
    assert LogFilter(node="node1").keeps(LogLine("node1", 3, "")) and not LogFilter(rank=2).keeps(LogLine("n", 3, ""))


@pytest.mark.parametrize(
    ("host", "command", "argv"),
    [
        (  # the inventory's own variables, as Ansible passes them
            Host("n0", "10.0.0.5", user="ubuntu", port=2222, key_file="/k/id"),
            (),
            ["ssh", "-o", "StrictHostKeyChecking=yes", "-o", "Port=2222", "-o", "IdentityFile=/k/id"]
            + ["-o", "User=ubuntu", "-o", "ConnectTimeout=10", "10.0.0.5"],
        ),
        (  # its ssh args as given (a config, a jump host...); the command quoted as one argument
            Host("n1", "node1", ssh_args=("-F", "/c/ssh_config", "-J", "bastion")),
            ("nvidia-smi", "-q", "it's"),
            ["ssh", "-o", "StrictHostKeyChecking=yes", "-F", "/c/ssh_config", "-J", "bastion"]
            + ["-o", "ConnectTimeout=10", "node1", "nvidia-smi -q 'it'\"'\"'s'"],
        ),
        (  # a host recorded with only a config file (aws, pcluster)
            Host("n2", "node2", ssh_config="/c/cfg"),
            ("true",),
            ["ssh", "-o", "StrictHostKeyChecking=yes", "-F", "/c/cfg", "-o", "ConnectTimeout=10", "node2", "true"],
        ),
    ],
)
def test_ssh_argv(host: Host, command: tuple[str, ...], argv: list[str]) -> None:
    assert ssh_argv(host, command) == argv


def test_ssh_g_output_parses() -> None:
    r = parse_g("hostname h\nuser u\nport 2222\nidentitiesonly yes\nproxyjump none\nproxycommand none\n")
    assert (r.hostname, r.user, r.port, r.identities_only, r.proxy_jump, r.proxy_command) == (
        "h",
        "u",
        2222,
        True,
        None,
        None,
    )
