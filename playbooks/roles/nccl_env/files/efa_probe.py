"""What this node has of EFA (AWS's Elastic Fabric Adapter), as one JSON line.

    python3 efa_probe.py DEVICES_DIR DMI_PRODUCT_FILE EFA_DIR PLUGIN_DIRS_JSON RDMA_READ_TYPES_JSON

Standard library only (no fi_info: it comes with the software this probe looks for). An EFA
device is an RDMA device (DEVICES_DIR, /sys/class/infiniband) whose driver is ``efa`` (or, on
older kernels, whose name says efa). RDMA read: libfabric enables FI_EFA_USE_DEVICE_RDMA by itself
where the device has it, and aborts where the variable asks for it and the device has none
(efa_rdm_get_use_device_rdma): devices from PCI id 0xefa2 (EFA v3, p5) on always have it; of the
0xefa1 ones (EFA v2) only the types listed (p4d, p4de: the node's DMI product name) do, as AWS
documents; 0xefa0 (v1: p3dn, c5n) never.
"""

import json
import os
import sys

LIBS = ("libnccl-net-ofi.so", "libnccl-net.so")


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def efa_devices(root):
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        driver = os.path.basename(os.path.realpath(os.path.join(root, name, "device", "driver")))
        if driver == "efa" or "efa" in name:
            found.append({"name": name, "pci_id": read(os.path.join(root, name, "device", "device")).lower()})
    return found


def lib_dir(top, names):
    """The directory under ``top`` (lib, lib64, lib/<triplet>) holding one of ``names``, and which."""
    for sub in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
        for name in names:
            if os.path.exists(os.path.join(top, sub, name)):
                return os.path.join(top, sub), name
    return "", ""


def main(devices_dir, product_file, efa_dir, plugin_dirs, rdma_read_types):
    devices = efa_devices(devices_dir)
    product = read(product_file)
    ids = {d["pci_id"] for d in devices}
    rdma_read = bool(devices) and all(
        i.startswith("0xefa") and len(i) == 6 and (i >= "0xefa2" or (i == "0xefa1" and product in rdma_read_types))
        for i in ids
    )
    efa_lib, _ = lib_dir(efa_dir, ("libfabric.so", "libfabric.so.1"))
    plugin_lib, plugin = "", ""
    for top in plugin_dirs:
        plugin_lib, plugin = lib_dir(top, LIBS)
        if plugin_lib:
            break
    print(
        json.dumps(
            {
                "devices": devices,
                "product": product,
                "rdma_read": rdma_read,
                "efa_lib": efa_lib,
                "plugin_lib": plugin_lib,
                "plugin": plugin,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5]))
