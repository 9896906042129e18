"""Run on a host by llmfleet.facts.NvidiaHost (python3, standard library only): prints one JSON object."""

# sh() and rd() come from _helpers.py, which llmfleet.facts.python_script puts in front
# ruff: noqa: F821

import glob
import json
import os
import re
import shutil

osr = dict(line.rstrip().split("=", 1) for line in open("/etc/os-release") if "=" in line)
gpus = []
for d in sorted(glob.glob("/sys/bus/pci/devices/*")):
    # class 0x0300 (VGA) or 0x0302 (3D controller: datacenter GPUs)
    if rd(d + "/vendor") == "0x10de" and (rd(d + "/class") or "").startswith(("0x0300", "0x0302")):
        gpus.append({"slot": os.path.basename(d), "device": rd(d + "/device")})

module = None
version = rd("/sys/module/nvidia/version")
banner = rd("/proc/driver/nvidia/version") or ""
if version or banner:
    m = re.search(r"Kernel Module(?: for \S+)?\s+([0-9.]+)", banner)
    module = {"version": version or (m.group(1) if m else None),
              "flavour": "open" if "Open Kernel Module" in banner else "proprietary"}

packages = {}
for line in sh(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Status}\n"]).splitlines():
    name, ver, status = (line.split("\t") + ["", ""])[:3]
    if status == "installed" and re.match(r"(lib)?(nvidia|cuda)", name):
        packages[name] = ver
held = sorted(sh(["apt-mark", "showhold"]).split())
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
                  "kernel": kernel, "pci_gpus": gpus, "module": module, "packages": packages, "held": held,
                  "dkms": dkms, "smi": smi, "supported_clocks": supported}))
