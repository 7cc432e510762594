"""The head's supervisor replacing a lost node itself (infra/launch/head_agent.py's ``replace_lost``,
``moved``), and what its record says of it (``RunResult.replaced``). On the twin, end to end, with this
machine's ddpctl killed: tests/integration/test_spot_twin.py."""

from __future__ import annotations

import json

from ddpctl.infra.launch import head_agent
from ddpctl.infra.launch.nodes import OutputLine, RunResult, result_of

NODE = {
    "node": "node2",
    "host": "node2",
    "address": "10.77.0.102",
    "command": "cd /w && exec /v/bin/python -m torch.distributed.run --nnodes 2:3 --local-addr 10.77.0.102 s.py",
    "secret": "",
    "project_dir": "/w/projects/abc",
    "deps": "",
}


def test_a_node_on_its_new_machine_launches_at_its_new_address() -> None:
    moved = head_agent.moved(NODE, "10.77.0.109")
    assert moved["address"] == "10.77.0.109" and moved["host"] == "node2"  # its name on the mesh stays
    assert "--local-addr 10.77.0.109 s.py" in moved["command"] and "10.77.0.102" not in moved["command"]


def test_the_replacements_progress_goes_to_the_runs_output_and_its_answer_is_read() -> None:
    said: list[OutputLine] = []
    answer = {"node": "node2", "replaced": True, "instance": "i-9", "host": "10.77.0.109"}
    lines = ["ddpctl: node2: EC2 took its spot instance back\n", json.dumps(answer) + "\n"]
    assert head_agent.answer(lines, "node2", said.append) == answer
    assert said == [OutputLine("node2", None, "ddpctl: node2: EC2 took its spot instance back")]


def test_a_replacement_that_fails_or_says_nothing_leaves_the_node_where_it_was() -> None:
    said: list[OutputLine] = []
    failed = {"node": "node2", "error": "your AWS identity may not call ec2:RunInstances"}
    lines = ["ddpctl: node2 not replaced: ...\n", json.dumps(failed) + "\n"]
    assert head_agent.answer(lines, "node2", said.append).get("replaced") is None
    assert head_agent.answer(["Traceback (most recent call last):\n", "{not json\n"], "node2", said.append) == {}
    assert said[-1] == OutputLine("node2", None, "{not json")  # shown, as any line it printed


def test_the_record_keeps_replacements_only_where_there_were_some() -> None:
    plain = RunResult("r1", 0, 1.0)
    assert "replaced" not in plain.to_dict()
    done = RunResult("r1", 0, 1.0, replaced={"node2": {"instance": "i-9", "host": "10.77.0.109"}})
    assert done.to_dict()["replaced"] == {"node2": {"instance": "i-9", "host": "10.77.0.109"}}
    assert result_of({"result": done.to_dict()}).replaced == done.replaced


def test_a_call_the_heads_role_may_not_make_names_the_heads_policy() -> None:
    from botocore.exceptions import ClientError

    from ddpctl.infra.providers.aws.errors import HEAD_POLICY_DOC, POLICY_DOC, explain

    refused = ClientError(
        {"Error": {"Code": "UnauthorizedOperation", "Message": "You are not authorized to perform this operation."}},
        "RunInstances",
    )
    on_head = str(explain(refused, "us-east-1", HEAD_POLICY_DOC))
    assert "may not call ec2:RunInstances" in on_head and "docs/aws-head-iam-policy.json" in on_head
    assert (
        "docs/aws-iam-policy.json"
        in str(explain(refused, "us-east-1"))
        == str(explain(refused, "us-east-1", POLICY_DOC))
    )
