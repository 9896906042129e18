"""Run on a host by llmfleet.facts.NvidiaHost (python3, standard library only): prints one JSON object."""

import json
import os
import re
import shutil

# llmfleet/remote/_helpers.py, sent along by python_script
from _helpers import nvidia_module, pci_gpus, pci_nvswitches, sh

osr = dict(line.rstrip().split("=", 1) for line in open("/etc/os-release") if "=" in line)
gpus = [{"slot": g["slot"], "device": g["device"]} for g in pci_gpus()]
nvswitches = pci_nvswitches()
module = nvidia_module()

# One listing for the versions and the holds (apt-mark showhold read the same selections through
# apt's cache, 25 ms of the host's CPU more): the pattern lists packages held but not installed
# too, as apt-mark does, and a package of another architecture than dpkg's own is named name:arch,
# as apt-mark names it.
FIELDS = "${Package}\t${Version}\t${db:Status-Status}\t${db:Status-Want}\t${Architecture}\n"
rows = [(line.split("\t") + [""] * 4)[:5] for line in sh(["dpkg-query", "-W", "-f", FIELDS, "*"]).splitlines()]
native = next((arch for name, _, _, _, arch in rows if name == "dpkg"), "")
packages, held = {}, []
for name, ver, status, want, arch in rows:
    if status == "installed" and re.match(r"(lib)?(nvidia|cuda)|datacenter-gpu-manager", name):
        packages[name] = ver
    if want == "hold":
        held.append(name if arch in (native, "all", "") else f"{name}:{arch}")
held.sort()
kernel = os.uname().release
dkms = [line for line in sh(["dkms", "status", "-k", kernel]).splitlines() if line.startswith("nvidia")]

smi, supported = [], []
if module and shutil.which("nvidia-smi"):
    query = "index,clocks.applications.memory,clocks.applications.graphics,persistence_mode"
    for line in sh(["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"]).splitlines():
        index, mem, gfx, pm = [x.strip() for x in line.split(",")]
        smi.append({"index": int(index), "app_memory": int(mem) if mem.isdigit() else None,
                    "app_graphics": int(gfx) if gfx.isdigit() else None, "persistence": pm})
    out = sh(["nvidia-smi", "-i", "0", "--query-supported-clocks=memory,graphics", "--format=csv,noheader,nounits"])
    supported = [[int(x) for x in line.split(",")] for line in out.splitlines() if line.strip()]

print(json.dumps({"os": osr.get("ID", "").strip('"'), "os_version": osr.get("VERSION_ID", "").strip('"'),
                  "kernel": kernel, "pci_gpus": gpus, "pci_nvswitches": nvswitches, "module": module,
                  "packages": packages, "held": held, "dkms": dkms, "smi": smi, "supported_clocks": supported}))
