"""Run on a host by llmfleet.facts.Preflight (python3, standard library only): OS and version,
kernel, CPUs, sockets and NUMA nodes, and every PCI device (slot, class, vendor, device), as one
JSON object."""

import glob
import json
import os
import platform

from _helpers import pci_devices, rd  # llmfleet/remote/_helpers.py, sent along by python_script

osr = dict(line.rstrip().split("=", 1) for line in open("/etc/os-release") if "=" in line)
sockets = {rd(p) for p in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/physical_package_id")}
print(json.dumps({"os": osr.get("ID", "").strip('"'), "os_version": osr.get("VERSION_ID", "").strip('"'),
                  "kernel": platform.release(), "cpus": os.cpu_count(), "sockets": len(sockets),
                  "numa_nodes": len(glob.glob("/sys/devices/system/node/node[0-9]*")), "pci": pci_devices()}))
