"""nvidia-smi's query output and the kernel log's Xid lines read into typed values (infra/runs/nvidia_smi.py),
on texts as nvidia-smi and the NVIDIA driver write them."""

from __future__ import annotations

import pytest

from ddpctl.infra.runs import nvidia_smi
from ddpctl.infra.runs.nvidia_smi import QueryError, bus_id, gpu_of, parse_query, parse_xids

# `nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader` on an 8-GPU H100 node: GPU 0 idle, GPU 3 at its
# power cap and thermally slowed (0x44: SW Power Cap + HW Thermal Slowdown), GPU 5 with uncorrected errors
H100 = """\
0, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c60, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 0, 0, 0x0000000000000001
1, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c61, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0, 0, 0x0000000000000000
2, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c62, NVIDIA H100 80GB HBM3, 00000000:3A:00.0, 0, 0, 0x0000000000000004
3, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c63, NVIDIA H100 80GB HBM3, 00000000:5D:00.0, 0, 0, 0x0000000000000044
4, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c64, NVIDIA H100 80GB HBM3, 00000000:9A:00.0, 0, 0, 0x0000000000000001
5, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c65, NVIDIA H100 80GB HBM3, 00000000:AB:00.0, 2, 7, 0x0000000000000001
6, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c66, NVIDIA H100 80GB HBM3, 00000000:BA:00.0, 0, 3, 0x0000000000000001
7, GPU-1b7c5a3e-6f0d-2a1b-8c4d-1e2f3a4b5c67, NVIDIA H100 80GB HBM3, 00000000:DB:00.0, 0, 0, 0x0000000000000001
"""
# a GPU without ECC (a GeForce) and an old driver's answer to a field it does not know
GEFORCE = "0, GPU-0a1b2c3d-0000-1111-2222-333344445555, NVIDIA GeForce RTX 4090, 00000000:01:00.0, [N/A], [N/A], 0x0000000000000000\n"
NO_ECC_SUPPORT = "0, GPU-0a1b, Tesla T4, 00000000:00:1E.0, [Not Supported], [Not Supported], [Not Supported]\n"
# `dmesg` lines (with their time stamps) as the driver writes them; others between
DMESG = [
    "[    2.104211] nvidia: module license 'NVIDIA' taints kernel.",
    "[ 8123.331702] NVRM: Xid (PCI:0000:ab:00): 48, pid=1234, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 0.",
    "[ 8123.331755] NVRM: Xid (PCI:0000:18:00): 13, pid=2211, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    "[ 9001.000001] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "[ 9001.000002] NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.",
    "Okt 06 17:59:27 balrog kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.",
]


def test_a_query_line_each_gpu_with_its_counts_and_reasons() -> None:
    gpus = parse_query(H100)
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0].name == "NVIDIA H100 80GB HBM3" and gpus[0].pci == "0000:18:00"
    assert gpus[0].reasons == ("Idle",) and gpus[0].bad_reasons == ()
    assert gpus[1].reasons == () and gpus[2].reasons == ("SW Power Cap",) and gpus[2].bad_reasons == ()
    assert gpus[3].reasons == ("SW Power Cap", "HW Thermal Slowdown") and gpus[3].bad_reasons == (
        "HW Thermal Slowdown",
    )
    assert (gpus[5].ecc_volatile, gpus[5].ecc_aggregate) == (2, 7) and (
        gpus[6].ecc_volatile,
        gpus[6].ecc_aggregate,
    ) == (0, 3)


def test_values_a_gpu_does_not_report_are_none() -> None:
    [geforce] = parse_query(GEFORCE)
    assert (geforce.ecc_volatile, geforce.ecc_aggregate, geforce.reasons_mask) == (None, None, 0)
    [t4] = parse_query(NO_ECC_SUPPORT)
    assert (t4.ecc_volatile, t4.ecc_aggregate, t4.reasons_mask, t4.reasons) == (None, None, None, ())


@pytest.mark.parametrize(
    "text",
    ['Field "clocks_event_reasons.active" is not a valid field to query.', "0, GPU-x, NVIDIA A10G, 0"],
)
def test_anything_else_is_refused_with_its_line(text: str) -> None:
    with pytest.raises(QueryError, match="not a line of 7 fields"):
        parse_query(text)


def test_every_reason_bit_has_nvidia_smis_name() -> None:
    every = nvidia_smi.GpuStatus(0, "u", "n", "p", 0, 0, 0x1FF)
    assert every.reasons == (
        "Idle",
        "Applications Clocks Setting",
        "SW Power Cap",
        "HW Slowdown",
        "Sync Boost",
        "SW Thermal Slowdown",
        "HW Thermal Slowdown",
        "HW Power Brake Slowdown",
        "Display Clock Setting",
    )
    assert every.bad_reasons == ("HW Slowdown", "SW Thermal Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown")
    assert nvidia_smi.OLD_FIELDS[-1] == "clocks_throttle_reasons.active" and len(nvidia_smi.FIELDS) == 7


def test_xid_lines_their_code_and_gpu() -> None:
    xids = parse_xids(DMESG)
    assert [(x.code, x.pci) for x in xids] == [
        (48, "0000:ab:00"),
        (13, "0000:18:00"),
        (79, "0000:5d:00"),
        (79, "0000:01:00"),
    ]
    assert [x.application for x in xids] == [False, True, False, False]
    assert [bool(x.note) for x in xids] == [False, True, False, False]
    assert parse_xids(["NVRM: Xid (PCI:0000:18:00): 63, pid=1, Row Remapper"])[0].note.startswith("an error the GPU")
    assert xids[2].text == "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    gpus = parse_query(H100)
    assert [gpu_of(x, gpus) for x in xids] == ["GPU 5", "GPU 0", "GPU 3", "PCI 0000:01:00"]


def test_bus_ids_of_nvidia_smi_and_the_kernel_log_agree() -> None:
    assert bus_id("00000000:AB:00.0") == bus_id("0000:ab:00") == "0000:ab:00"
