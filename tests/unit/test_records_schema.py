"""Records read through one validated schema (issue 42: "one damaged field is one line"), and the JSON
and metrics pictures made from them (pure; the real CLI on the same inputs is
tests/integration/test_damaged_records.py).

- a cluster's state file: every field type-checked at load (``model/schema.py``), a damaged one a
  ``DamagedState`` naming the field, with the ``down`` line that works (I4, I6, I11, I19, I20 and
  more of their kind); a cluster with no nodes is not planned on with a ``--nodes 0`` hint (I15);
- a run's record: the same, ``SchemaError`` naming the field (J7, J14; a handle's ``ref`` that is not
  a pid or job id);
- ``--json``: non-finite numbers are null, the document strict JSON (D2, D3, D17);
- ``metrics --png``: the curves a script's lines have (D18, D19, D21, D31), and a FILE refused before
  matplotlib (D4, D5, D6, D8).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from ddpctl.infra.launch.launcher import Handle
from ddpctl.infra.launch.plan import plan_torchrun
from ddpctl.infra.model.errors import UsageError
from ddpctl.infra.model.host import Host
from ddpctl.infra.model.schema import SchemaError
from ddpctl.infra.model.spec import PROVIDERS, ClusterSpec, RunSpec
from ddpctl.infra.model.state import ClusterState, DamagedState, NodeInfo, Resource
from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers import NAMES
from ddpctl.infra.runs import curves, metrics
from ddpctl.infra.runs.options import RunOptions
from ddpctl.infra.runs.records import check_record
from ddpctl.output_json import dumps, finite


def healthy() -> ClusterState:
    """A state whose every record type has a value (a field the schema does not read fails here)."""
    ssh = Host("node1", "10.0.0.2", user="u", port=2222, key_file="/k", ssh_args=("-o", "A=b"), vars={"x": 1})
    nodes = [NodeInfo("node0", "127.0.0.1", "/w/node0", cpus=2), NodeInfo("node1", "10.0.0.2", "/w", ssh=ssh)]
    resources = [Resource("dir", "/w/node0", "created"), Resource("dir", "/w/node1", "created", {"a": "b"})]
    spec = ClusterSpec(name="c", nodes=2, env={"A": "1"}, autodown_s=60)
    return ClusterState(spec=spec, cluster_id="cid1", status="up", nodes=nodes, resources=resources, created_at=1.8e9)


def edit(change: Callable[[dict], object]) -> Callable[[dict], object]:
    return change


#: a damaged field of a state file -> the field the DamagedState names, and what it says of it
STATE_DAMAGES: dict[str, tuple[Callable[[dict], object], str]] = {
    "I4 created_at a word": (edit(lambda d: d.update(created_at="yesterday")), "created_at: 'yesterday', not a time"),
    "I20 created_at 1e300": (edit(lambda d: d.update(created_at=1e300)), "created_at: 1e+300 is not a time"),
    "created_at negative": (edit(lambda d: d.update(created_at=-5)), "created_at: -5 is not a time"),
    "autodown_at true": (edit(lambda d: d.update(autodown_at=True)), "autodown_at: True, not a time"),
    "I6 a resource id a number": (
        edit(lambda d: d["resources"][1].update(id=123)),
        "resources[1].id: 123, not a string",
    ),
    "a resource a string": (
        edit(lambda d: d["resources"].__setitem__(0, "dir")),
        "resources[0]: a string, not an object",
    ),
    "I19 cpus a word": (edit(lambda d: d["nodes"][0].update(cpus="many")), "nodes[0].cpus: 'many', not a whole number"),
    "cpus 0": (edit(lambda d: d["nodes"][0].update(cpus=0)), "nodes[0].cpus: 0 is out of range"),
    "gpus a float": (edit(lambda d: d["nodes"][1].update(gpus=1.5)), "nodes[1].gpus: 1.5, not a whole number"),
    "workdir null": (edit(lambda d: d["nodes"][1].update(workdir=None)), "nodes[1].workdir: None, not a string"),
    "ssh port a word": (
        edit(lambda d: d["nodes"][1].update(ssh={"name": "n", "address": "a", "port": "x"})),
        "nodes[1].ssh.port: 'x', not a whole number",
    ),
    "ssh_args not strings": (
        edit(lambda d: d["nodes"][1].update(ssh={"name": "n", "address": "a", "ssh_args": [1]})),
        "nodes[1].ssh.ssh_args[0]: 1, not a string",
    ),
    "I11 provider gcp": (edit(lambda d: d["spec"].update(provider="gcp")), "spec.provider: 'gcp', not one of local"),
    "spec nodes a word": (edit(lambda d: d["spec"].update(nodes="2")), "spec.nodes: '2', not a whole number"),
    "spec port too high": (edit(lambda d: d["spec"].update(port=70000)), "spec.port: 70000 is out of range"),
    "an env value a number": (edit(lambda d: d["spec"].update(env={"A": 1})), "spec.env.A: 1, not a string"),
    "a provider option a list": (
        edit(lambda d: d["spec"]["options"].update(region=["x"])),
        "spec.options.region: ['x'], not text",
    ),
    "autodown_s negative": (edit(lambda d: d["spec"].update(autodown_s=-1)), "spec.autodown_s: -1 is out of range"),
    "status a number": (edit(lambda d: d.update(status=3)), "status: 3, not one of planned"),
    "launcher unknown": (edit(lambda d: d.update(launcher="mpirun")), "launcher: 'mpirun', not one of torchrun"),
    "ephemeral a word": (edit(lambda d: d.update(ephemeral="no")), "ephemeral: 'no', not true or false"),
    "cluster_id a number": (edit(lambda d: d.update(cluster_id=7)), "cluster_id: 7, not a string"),
    "nodes an object": (edit(lambda d: d.update(nodes={})), "nodes: {}, not a list"),
    "a field no ddpctl writes": (edit(lambda d: d.update(colour="red")), "colour: a field no ddpctl writes"),
    "a newer version": (edit(lambda d: d.update(version=99)), "version: 99 is out of range"),
}


@pytest.mark.parametrize("damage", STATE_DAMAGES, ids=list(STATE_DAMAGES))
def test_a_damaged_state_field_is_named(tmp_path: Path, damage: str) -> None:
    change, said = STATE_DAMAGES[damage]
    store = StateStore(tmp_path)
    store.save(healthy())
    doc = json.loads(store.path("c").read_text())
    change(doc)
    store.path("c").write_text(json.dumps(doc))
    with pytest.raises(DamagedState) as caught:
        store.load("c")
    assert caught.value.reason.startswith(said), caught.value.reason
    # the `down` line it gives works as written: --provider where the file names none ddpctl has
    says_provider = damage != "I11 provider gcp"
    down = "`ddpctl down --name c`" if says_provider else "`ddpctl down --name c --provider PROVIDER`"
    assert down in str(caught.value)
    assert store.salvage("c").provider == ("local" if says_provider else None)
    assert store.salvage("c").cluster_id == ("cid1" if damage != "cluster_id a number" else None)


def test_a_healthy_state_and_older_versions_still_load(tmp_path: Path) -> None:
    """Every field of every record type round-trips: a field added to one must be read in
    ``state.py``'s ``from_dict`` (else every state file written since reads as damaged)."""
    store = StateStore(tmp_path)
    store.save(healthy())
    assert store.load("c") == healthy()
    doc = json.loads(store.path("c").read_text())
    for key in ("created_at", "autodown_at", "launcher", "ephemeral", "shared_dir"):
        doc.pop(key)  # fields an older version did not write: their defaults
    doc["version"] = 1
    store.path("c").write_text(json.dumps(doc))
    assert store.load("c").nodes == healthy().nodes


def test_the_model_knows_every_provider_the_registry_has() -> None:
    assert PROVIDERS == NAMES


def test_I15_a_cluster_with_no_nodes_is_not_planned_on_with_a_nodes_0_hint() -> None:
    state = healthy()
    state.nodes = []
    with pytest.raises(UsageError) as caught:
        plan_torchrun(state, RunSpec(job="m", nodes=2), script="/s.py", port=29500)
    assert "--nodes 0" not in str(caught.value) and "records no nodes" in str(caught.value)
    assert "`ddpctl down --name c`" in str(caught.value)


def record() -> dict:
    return {"options": RunOptions(job="mnist", nodes=2).to_dict(), "cluster": "c", "ephemeral": False}


#: a damaged field of a run's record -> the field the SchemaError names
RUN_DAMAGES: dict[str, tuple[Callable[[dict], object], str]] = {
    "J7 cluster a number": (edit(lambda d: d.update(cluster=5)), "cluster: 5, not a string"),
    "cluster a path": (edit(lambda d: d.update(cluster="../x")), "cluster: '../x', not a cluster name"),
    "J14 snapshot_dir a number": (
        edit(lambda d: d["options"].update(snapshot_dir=5)),
        "options.snapshot_dir: 5, not a string",
    ),
    "job missing": (edit(lambda d: d["options"].pop("job")), "options.job: missing"),
    "args a string": (edit(lambda d: d["options"].update(args="x")), "options.args: 'x', not a list of strings"),
    "nodes a word": (edit(lambda d: d["options"].update(nodes="2")), "options.nodes: '2', not a whole number"),
    "nproc a word": (
        edit(lambda d: d["options"].update(nproc_per_node="many")),
        "options.nproc_per_node: 'many', not one of gpu, auto",
    ),
    "nproc a list of words": (
        edit(lambda d: d["options"].update(nproc_per_node=[1, "x"])),
        "options.nproc_per_node[1]: 'x', not a whole number",
    ),
    "launcher unknown": (edit(lambda d: d["options"].update(launcher="mpirun")), "options.launcher: 'mpirun', not one"),
    "run_id a path": (edit(lambda d: d["options"].update(run_id="../r")), "options.run_id: '../r', not a run id"),
    "env not strings": (edit(lambda d: d["options"].update(env=[1])), "options.env[0]: 1, not a string"),
    "ephemeral a word": (edit(lambda d: d.update(ephemeral="yes")), "ephemeral: 'yes', not true or false"),
    "price NaN": (edit(lambda d: d.update(node_usd_per_hour=math.nan)), "node_usd_per_hour: nan, not a finite"),
    "a handle's ref a command": (
        edit(lambda d: d.update(handle={"kind": "slurm", "ref": "1; rm -rf ~", "folder": "/o", "run_id": "r1"})),
        "handle.ref: '1; rm -rf ~', not a process or job id",
    ),
    "options a list": (edit(lambda d: d.update(options=[])), "options: a list, not an object"),
    "an option no ddpctl writes": (
        edit(lambda d: d["options"].update(colour="red")),
        "options.colour: a field no ddpctl writes",
    ),
}


@pytest.mark.parametrize("damage", RUN_DAMAGES, ids=list(RUN_DAMAGES))
def test_a_damaged_run_record_field_is_named(damage: str) -> None:
    change, said = RUN_DAMAGES[damage]
    doc = record()
    change(doc)
    doc = json.loads(json.dumps(doc))  # as read back from the file
    with pytest.raises(SchemaError) as caught:
        check_record(doc)
    assert str(caught.value).startswith(said), str(caught.value)


def test_a_healthy_run_record_reads_back() -> None:
    doc = record() | {"cluster_id": "cid", "nodes_used": 2, "node_usd_per_hour": 3.06, "plan": {"run_id": "r1"}}
    doc["handle"] = {"kind": "slurm", "ref": "42", "folder": "/o", "run_id": "r1"}
    doc["options"]["nproc_per_node"] = [2, 1]
    assert check_record(json.loads(json.dumps(doc))) == RunOptions(job="mnist", nodes=2, nproc_per_node=(2, 1))


def test_a_handle_whose_ref_is_not_an_id_is_not_read() -> None:
    assert Handle.from_dict({"kind": "slurm", "ref": "7", "folder": "/o", "run_id": "r"}) is not None
    assert Handle.from_dict({"kind": "slurm", "ref": "7; rm -rf ~", "folder": "/o", "run_id": "r"}) is None


def strict(text: str) -> object:
    def refuse(word: str) -> object:
        raise ValueError(f"{word} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "given,expected",
    [
        ({"loss": math.nan}, {"loss": None}),  # D2
        ({"accuracy": math.inf, "x": -math.inf}, {"accuracy": None, "x": None}),  # D2, D3
        ({"lines": [{"step": float("1e999"), "loss": 0.5}]}, {"lines": [{"step": None, "loss": 0.5}]}),  # D17
        (
            {"runs": ({"cost": 1.5, "ok": True, "n": 3, "s": "NaN"},)},
            {"runs": [{"cost": 1.5, "ok": True, "n": 3, "s": "NaN"}]},
        ),
    ],
)
def test_json_documents_are_strict(given: dict, expected: dict) -> None:
    assert finite(given) == expected
    assert strict(dumps(given)) == expected


def test_a_path_in_a_document_is_its_text() -> None:
    assert strict(dumps({"file": Path("/a/b")})) == {"file": "/a/b"}


#: a run's metric lines -> the curves --png draws (name: points)
CURVES = {
    "D31 the documented helper: loss only": (
        [{"time": 1.0, "step": 1, "loss": 0.9}, {"time": 2.0, "step": 2, "loss": 0.7}],
        {"loss": ([1, 2], [0.9, 0.7])},
    ),
    "D18 throughput without loss": (
        [{"kind": "step", "step": 1, "samples_per_s": 40.0}],
        {"samples_per_s": ([1], [40.0])},
    ),
    "D19 a line without step": (
        [{"kind": "step", "loss": 1.0}, {"kind": "step", "step": 2, "loss": 0.5}],
        {"loss": ([2], [0.5])},
    ),
    "D21 loss a word": (
        [{"kind": "step", "step": 1, "loss": "abc", "samples_per_s": 10}],
        {"samples_per_s": ([1], [10])},
    ),
    "non-finite and true/false values": (
        [{"step": 1, "loss": math.nan}, {"step": True, "loss": 1.0}, {"step": 3, "loss": 0.2}],
        {"loss": ([3], [0.2])},
    ),
    "epochs, accuracy and tokens": (
        [
            {"kind": "step", "step": 1, "loss": 2.0, "tokens_per_s": 100, "samples_per_s": 1},
            {"kind": "epoch", "step": 1, "loss": 1.5, "accuracy": 90.0},
        ],
        {
            "loss": ([1], [2.0]),
            "epoch loss": ([1], [1.5]),
            "epoch accuracy": ([1], [90.0]),
            "tokens_per_s": ([1], [100]),
        },
    ),
}


def drawn(lines: list[dict]) -> dict[str, tuple[list, list]]:
    """The series ``--png`` draws of one run's lines, by name (``epoch KEY``: the epoch means)."""
    chart = curves.chart([curves.RunLines("r1", Path("metrics.jsonl"), lines)])
    return {f"{'epoch ' * s.epochs}{s.key}": (list(s.steps), list(s.values)) for p in chart.panels for s in p.series}


@pytest.mark.parametrize("case", CURVES, ids=list(CURVES))
def test_the_curves_are_those_the_lines_have(case: str) -> None:
    lines, expected = CURVES[case]
    assert drawn(lines) == expected


def test_no_curve_is_one_line_before_matplotlib() -> None:
    from ddpctl.infra.model.errors import DdpctlError

    for lines in ([{"note": "hi"}], [{"step": "x", "loss": 1.0}, {"note": "hi"}]):
        with pytest.raises(DdpctlError, match="run r1: no metric line has a number .* nothing to draw"):
            curves.export([curves.RunLines("r1", Path("m"), lines)], curves.Targets(png=Path("/nonexistent/x.png")))


#: a --png FILE -> what its one line says (refused before matplotlib is imported)
PICTURES = {
    "D8 empty": ("", "is not a file name"),
    "blank": ("  ", "is not a file name"),
    "D6 a .txt": ("out.txt", "a .txt file is not a picture format"),
    "no suffix": ("curves", "a name without a suffix is not a picture format"),
    "D4 a folder that does not exist": ("/nonexistent/dir/x.png", "the folder /nonexistent/dir does not exist"),
    "D5 /proc": ("/proc/x.png", "no file can be made in /proc"),
    "under a file": ("/etc/hostname/x.png", "the folder /etc/hostname does not exist"),
}


@pytest.mark.parametrize("case", PICTURES, ids=list(PICTURES))
def test_a_picture_file_that_cannot_be_drawn_is_refused(case: str) -> None:
    path, said = PICTURES[case]
    with pytest.raises(UsageError, match=said.replace(".", r"\.")):
        metrics.check_picture(path)


def test_a_picture_file_that_can_be_drawn(tmp_path: Path) -> None:
    assert metrics.check_picture(str(tmp_path / "c.PNG")) == tmp_path / "c.PNG"
    assert metrics.check_picture(str(tmp_path / "c.svg")) == tmp_path / "c.svg"
    assert list(tmp_path.iterdir()) == []  # the probe is gone
    (tmp_path / "d.png").mkdir()
    with pytest.raises(UsageError, match="is a folder"):
        metrics.check_picture(str(tmp_path / "d.png"))


@pytest.mark.parametrize(
    "doc,said",
    [
        ({"result": {"exit_code": "x", "wall_s": 1.0}}, "result.exit_code: 'x', not a whole number"),
        ({"result": {"exit_code": 0, "wall_s": math.inf}}, "result.wall_s: inf, not a finite number"),
        ({"result": {"exit_code": 0, "interrupted": "no"}}, "result.interrupted: 'no', not true or false"),
        ({"result": [1, 2]}, "result: a list, not an object"),
        ([1, 2], "a list, not an object"),
    ],
)
def test_a_damaged_run_result_is_named(doc: object, said: str) -> None:
    from ddpctl.infra.runs.records import read_result

    with pytest.raises(SchemaError) as caught:
        read_result(doc)
    assert str(caught.value).startswith(said), str(caught.value)


def test_a_run_result_reads_back() -> None:
    from ddpctl.infra.runs.records import read_result

    assert read_result({"result": {"exit_code": 1, "wall_s": 2, "plan": {}}, "plan": {}}) == (1, 2.0, False)
    assert read_result({"result": {"exit_code": None, "interrupted": True}}) == (None, None, True)
