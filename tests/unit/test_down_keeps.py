"""Results survive `down` (issue 29): which runs' outputs exist only on a cluster, the question a
billed cluster's `down` asks about them, copying them into the runs' records, `ddpctl download`,
and each run's cost in `ddpctl runs`.

The planning is tested as values; the copy for real on a local cluster here (a real run, `download`,
then `down`), and over SSH from the EC2 twin's head node in tests/integration/test_aws_twin.py (an mnist run's
snapshot comes back on `download` and on `down`).

Its tests that start processes (real parts) are in tests/integration/test_down_keeps.py.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ddpctl.infra.model.store import StateStore
from ddpctl.infra.providers import get_provider
from ddpctl.infra.runs import download, outputs
from ddpctl.infra.runs.outputs import Recorded, RunFolder
from ddpctl.infra.runs.records import run_cost
from tests.support.down_keeps import CREATED, aws_state


def rec(run_id: str, *, cluster="c1", cluster_id="cid1", ephemeral=False, snapshot_dir="", started=CREATED + 60):
    return Recorded(run_id, cluster, cluster_id, ephemeral, snapshot_dir, started)


# ---- what is kept (pure) ------------------------------------------------------------------------


def test_the_runs_outputs_only_on_the_cluster() -> None:
    runs = [
        rec("r-own"),  # its own folder in the head's work directory
        rec("r-s3", snapshot_dir="s3://bucket/ckpt"),  # outlives the cluster
        rec("r-data", snapshot_dir="/data/ckpt/"),  # a folder of the user's own, on the nodes' disks
        rec("r-other", cluster="c2"),  # another cluster's
        rec("r-ephemeral", ephemeral=True),  # kept as it ended, with the cluster brought up for it
        rec("r-earlier", cluster_id="cid0"),  # an earlier cluster of the same name
        rec("r-old-before", cluster_id="", started=CREATED - 60),  # recorded before cluster ids were, and before
        rec("r-old-after", cluster_id=""),  # ... and after this cluster was made
    ]
    state = aws_state()
    assert outputs.to_keep(runs, state, disks_go=True) == [
        RunFolder("r-own", "/opt/ddpctl/work/runs/r-own"),
        RunFolder("r-data", "/data/ckpt"),
        RunFolder("r-old-after", "/opt/ddpctl/work/runs/r-old-after"),
    ]
    # nodes that stay (onprem, local): a --snapshot-dir of the user's own stays with them
    assert [f.run_id for f in outputs.to_keep(runs, state, disks_go=False)] == ["r-own", "r-old-after"]


def test_a_shared_directory_holds_the_runs_folders() -> None:
    state = aws_state()
    state.shared_dir = "/home/ubuntu/ddpctl-shared"
    assert outputs.folder(state, rec("r1")) == "/home/ubuntu/ddpctl-shared/runs/r1"
    assert outputs.folder(state, rec("r1", snapshot_dir="ckpt")) == "/opt/ddpctl/work/ckpt"  # relative: the head's


def test_only_providers_whose_nodes_go_lose_a_snapshot_dir() -> None:
    assert {n: get_provider(n).disks_go_with_down for n in ("local", "onprem", "aws", "pcluster")} == {
        "local": False,
        "onprem": False,
        "aws": True,
        "pcluster": True,
    }


# ---- the question ---------------------------------------------------------------------------------


def test_the_question_names_the_outputs_and_their_size() -> None:
    state, runs = aws_state(), Path("/home/me/.ddpctl/runs")
    assert (
        outputs.question(state, [], keep=True, runs_dir=runs)
        == "take down aws cluster 'c1' (2 node(s)) and delete all it made"
    )
    found = [RunFolder("r1", "/x/r1", 12_345_678, 3), RunFolder("r2", "/x/r2", 812, 1)]
    assert outputs.question(state, found, keep=True, runs_dir=runs) == (
        "take down aws cluster 'c1' (2 node(s)) and delete all it made; run outputs only on the cluster: "
        "run r1 (12.3 MB), run r2 (812 B); 12.3 MB in all, copied first into /home/me/.ddpctl/runs/<run id>/outputs "
        "(--no-keep-outputs skips that)"
    )
    assert outputs.question(state, found[1:], keep=False, runs_dir=runs) == (
        "take down aws cluster 'c1' (2 node(s)) and delete all it made; run outputs only on the cluster: "
        "run r2 (812 B), deleted with it (--no-keep-outputs)"
    )


@pytest.mark.parametrize(
    "size, text", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (4_100_000, "4.1 MB"), (2 * 10**12, "2.0 TB")]
)
def test_sizes_in_words(size: int, text: str) -> None:
    assert outputs.size_text(size) == text


def test_the_python_api_needs_yes_for_a_billed_cluster(home: Path) -> None:
    import ddpctl as api

    state = aws_state(nodes=1)
    state.nodes = []
    StateStore(home).save(state)
    with pytest.raises(api.UsageError, match=r"take down aws cluster 'c1' \(1 node\(s\)\) .*: pass yes=True"):
        api.down(progress=None)


# ---- cost ------------------------------------------------------------------------------------------


def test_a_runs_cost_is_its_nodes_price_for_as_long_as_it_ran() -> None:
    assert run_cost({"node_usd_per_hour": 3.06, "nodes_used": 2}, 1800.0) == 3.06
    assert run_cost({"node_usd_per_hour": None, "nodes_used": 2}, 1800.0) is None  # not billed
    assert run_cost({}, 1800.0) is None  # recorded before prices were
    assert run_cost({"node_usd_per_hour": 3.06, "nodes_used": 2}, None) is None  # still running


@pytest.mark.parametrize("has_data_filter", [True, False])
def test_a_tar_stream_cannot_write_outside_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_data_filter: bool
) -> None:
    """What comes off a node is unpacked with tarfile's data filter, or its rules by hand where the
    Python (3.10 before 3.10.12) has none: no name above the folder, no link out of it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        for name, data in (("snapshot.pt", b"ok"), ("../evil.txt", b"no")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    if not has_data_filter:
        monkeypatch.delattr(tarfile, "data_filter")
    into = tmp_path / "into"
    into.mkdir()
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r|") as archive:
        try:
            outputs._extract(archive, into)
        except tarfile.FilterError:
            assert has_data_filter  # the filter refuses the stream at its first bad member
    assert not (tmp_path / "evil.txt").exists() and not (into / "escape").is_symlink()
    assert (into / "snapshot.pt").read_bytes() == b"ok"


# ---- download of a cluster that took itself down (issue 37) ---------------------------------------


@pytest.mark.parametrize(
    ("kept_head", "said"),
    [
        (
            "i-head",
            "run r1's cluster 'c1' took itself down (autodown): node0 is stopped with the runs' outputs on its "
            "disk; `ddpctl down --name c1` copies them here (then `ddpctl download r1` reads them there)",
        ),
        (
            "",
            "run r1's cluster 'c1' took itself down (autodown) and its nodes' disks went, the run's outputs with "
            "them: `ddpctl down --name c1` deletes what is left",
        ),
    ],
)
def test_download_from_a_cluster_autodown_took_down_is_one_line(
    home: Path, monkeypatch: pytest.MonkeyPatch, kept_head: str, said: str
) -> None:
    """`ddpctl download` of a run whose cluster took itself down says so and what gets the outputs,
    rather than trying SSH to a head node that is stopped (or gone)."""
    import json
    from dataclasses import replace

    from ddpctl.infra.model.errors import DdpctlError
    from ddpctl.infra.providers.base import TakenDown

    store = StateStore(home)
    state = aws_state()
    state.spec = replace(state.spec, autodown_s=600)
    store.save(state)
    store.make_run_dir("r1")
    record = {"cluster": "c1", "cluster_id": "cid1", "options": {"job": "mnist"}}
    (store.run_dir("r1") / "options.json").write_text(json.dumps(record))
    provider = type(get_provider("aws"))
    monkeypatch.setattr(provider, "took_itself_down", lambda self, s: TakenDown(kept_head=kept_head))
    monkeypatch.setattr(outputs, "measure", lambda *a: pytest.fail("no SSH to a head autodown took down"))
    with pytest.raises(DdpctlError) as err:
        download.download(store, "r1", None, lambda _: None)
    assert str(err.value) == said
    monkeypatch.setattr(provider, "took_itself_down", lambda self, s: None)  # up and answering: measured
    monkeypatch.setattr(outputs, "measure", lambda *a: [])
    with pytest.raises(DdpctlError, match="run r1 left no outputs on 'c1'"):
        download.download(store, "r1", None, lambda _: None)
