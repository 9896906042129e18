"""Run on a host by llmfleet.facts.HardwareFingerprint (python3, standard library only): the parts
of the machine a swap or a degradation would change, as one JSON object."""

import glob
import json
import os
import shutil

from _helpers import pci_gpus, rd, sh  # llmfleet/remote/_helpers.py, sent along by python_script

cpu_model = None
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu_model = line.split(":", 1)[1].strip()
        break
mem_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
sockets = {rd(p) for p in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/physical_package_id")}

gpus, nvlink, driver = [], {}, None
if shutil.which("nvidia-smi"):
    fields = ["index", "name", "serial", "uuid", "vbios_version", "pci.bus_id", "pcie.link.gen.max",
              "pcie.link.width.max", "memory.total", "driver_version"]
    for line in sh(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]).splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(fields):
            g = dict(zip(fields, values))  # noqa: B905 (hosts may run python < 3.10)
            driver = g.pop("driver_version")
            gpus.append(g)
    # NVLink topology: nvidia-smi topo -m, GPU rows and columns (NV<n>: n links; PIX/PXB/PHB/NODE/SYS: PCIe paths)
    lines = [ln for ln in sh(["nvidia-smi", "topo", "-m"]).splitlines() if ln.strip()]
    if lines:
        header = lines[0].split()
        cols = [h for h in header if h.startswith("GPU")]
        for ln in lines[1:]:
            parts = ln.split()
            if parts and parts[0].startswith("GPU") and parts[0][3:].isdigit():
                nvlink[parts[0]] = {c: parts[1 + i] for i, c in enumerate(cols) if 1 + i < len(parts)}
else:
    # no driver: the NVIDIA GPUs the PCI bus shows
    gpus = [{"pci.bus_id": g["slot"], "device": g["device"], "pcie.link.width.max": g["max_link_width"]}
            for g in pci_gpus()]

disks = []
for d in sorted(glob.glob("/sys/block/*")):
    name = os.path.basename(d)
    if name.startswith(("loop", "ram", "dm-", "zram", "sr")):
        continue
    disks.append({"name": name, "size_sectors": rd(d + "/size"), "model": rd(d + "/device/model")})

print(json.dumps({
    "system": {"vendor": rd("/sys/class/dmi/id/sys_vendor"), "product": rd("/sys/class/dmi/id/product_name"),
               "serial": rd("/sys/class/dmi/id/product_serial")},
    "cpu": {"model": cpu_model, "count": os.cpu_count(), "sockets": len(sockets)},
    "memory_kib": mem_kib,
    "gpus": gpus,
    "nvlink": nvlink,
    "driver": driver,
    "disks": disks,
}, sort_keys=True))
