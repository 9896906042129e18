"""Run on a host by the verify suite (python3, standard library only): what Fabric Manager needs and
has, as one JSON object. The NVSwitches on the PCI bus and those the driver registered, the
Fabric Manager / NSCQ packages (version, held), its service, the loaded driver, and whether CUDA
initialises (cuInit through libcuda.so.1: 802 = "system not yet initialized", Fabric Manager missing).

Read-only: cuInit creates no context and changes nothing.
"""

import ctypes
import json
import os
import re
import shutil
import subprocess

from _helpers import nvidia_module, pci_nvswitches, sh  # llmfleet/remote/_helpers.py, sent along by python_script

FAMILY = re.compile(r"^(nvidia-fabricmanager|libnvidia-nscq)(-[0-9]+)?$")
SERVICE = "nvidia-fabricmanager.service"
REGISTERED = "/proc/driver/nvidia-nvswitch/devices"


def packages():
    found = {}
    for line in sh(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Want} ${db:Status-Status}\n"]
                   ).splitlines():
        name, version, state = (line.split("\t") + ["", ""])[:3]
        if FAMILY.match(name) and state.endswith(" installed"):
            found[name] = {"version": version, "held": state.startswith("hold")}
    return found


def service():
    """systemctl is-active / is-enabled answer on stdout whatever their exit status (inactive, disabled)."""
    if not shutil.which("systemctl"):
        return {"active": "no systemd (systemctl not found)", "enabled": "no systemd (systemctl not found)"}
    if not os.path.isdir("/run/systemd/system"):  # sd_booted(3): systemd is not PID 1 (a container, a VM's shell)
        return {"active": "no systemd running (not booted with systemd)",
                "enabled": "no systemd running (not booted with systemd)"}

    def ask(verb):
        try:
            proc = subprocess.run(["systemctl", verb, SERVICE], capture_output=True, text=True, timeout=60)
            return proc.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {"active": ask("is-active") or "unknown", "enabled": ask("is-enabled") or "not found"}


def cuda_init():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"error": f"libcuda.so.1 not loadable: {exc}"}
    rc = cuda.cuInit(0)
    out = {"rc": rc}
    name = ctypes.c_char_p()
    if rc and hasattr(cuda, "cuGetErrorName") and cuda.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
        out["name"] = name.value.decode()
    return out


module = nvidia_module()
state = {
    "pci_nvswitches": pci_nvswitches(),
    "registered_nvswitches": sorted(os.listdir(REGISTERED)) if os.path.isdir(REGISTERED) else None,
    "packages": packages(),
    "service": service(),
    "driver": module["version"] if module else None,
    "cuda_init": cuda_init(),
}
print(json.dumps(state))
