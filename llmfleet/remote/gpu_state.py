"""A host's GPU state in one JSON object, read through NVML (nvidia-ml-py), the kernel's driver
files and log, and PyTorch. Run with the python of the vLLM environment (it has nvidia-ml-py and
torch). Every section records its own error instead of failing the whole read.

Read-only: it sets nothing on any GPU.
"""

import ctypes
import json
import shutil
import subprocess
import sys

from _helpers import nvidia_module  # llmfleet/remote/_helpers.py, sent along by python_script


def nvml_state():
    import pynvml as n

    def get(fn, *args):
        try:
            value = fn(*args)
            return value.decode() if isinstance(value, bytes) else value
        except n.NVMLError as exc:
            return {"error": str(exc)}

    n.nvmlInit()
    try:
        out = {"driver": get(n.nvmlSystemGetDriverVersion), "nvml": get(n.nvmlSystemGetNVMLVersion), "gpus": []}
        for i in range(n.nvmlDeviceGetCount()):
            h = n.nvmlDeviceGetHandleByIndex(i)
            pci = get(n.nvmlDeviceGetPciInfo, h)
            mem = get(n.nvmlDeviceGetMemoryInfo, h)
            links = []
            for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
                state = get(n.nvmlDeviceGetNvLinkState, h, link)
                if isinstance(state, dict):  # NotSupported / InvalidArgument: no such link
                    break
                links.append(state)
            ecc = get(n.nvmlDeviceGetEccMode, h)
            gpu = {
                "index": i,
                "name": get(n.nvmlDeviceGetName, h),
                "pci_device_id": f"0x{pci.pciDeviceId >> 16:04x}" if not isinstance(pci, dict) else pci,
                "bus_id": pci.busId.decode() if not isinstance(pci, dict) and isinstance(pci.busId, bytes)
                else getattr(pci, "busId", None),
                "memory_mib": mem.total // 2**20 if not isinstance(mem, dict) else mem,
                "persistence": get(n.nvmlDeviceGetPersistenceMode, h),
                "app_memory": get(n.nvmlDeviceGetApplicationsClock, h, n.NVML_CLOCK_MEM),
                "app_graphics": get(n.nvmlDeviceGetApplicationsClock, h, n.NVML_CLOCK_GRAPHICS),
                "ecc_current": ecc[0] if isinstance(ecc, (list, tuple)) else ecc,
                "ecc_pending": ecc[1] if isinstance(ecc, (list, tuple)) else ecc,
                "ecc_volatile_uncorrected": get(n.nvmlDeviceGetTotalEccErrors, h,
                                                n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
                "retired_pages_pending": get(n.nvmlDeviceGetRetiredPagesPendingStatus, h),
                "remapped_rows": get(n.nvmlDeviceGetRemappedRows, h),
                "pcie_max_gen": get(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_gen": get(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_max_width": get(n.nvmlDeviceGetMaxPcieLinkWidth, h),
                "pcie_width": get(n.nvmlDeviceGetCurrPcieLinkWidth, h),
                "nvlink_states": links,
                "compute_capability": get(n.nvmlDeviceGetCudaComputeCapability, h),
            }
            gpu["fabric"] = fabric_info(n, h)
            if isinstance(gpu["remapped_rows"], tuple):
                corr, uncorr, pending, failure = gpu["remapped_rows"]
                gpu["remapped_rows"] = {"correctable": corr, "uncorrectable": uncorr, "pending": bool(pending),
                                        "failure": bool(failure)}
            out["gpus"].append(gpu)
        return out
    finally:
        n.nvmlShutdown()


def fabric_info(n, handle):
    """The GPU's fabric registration (NVSwitch boards, Hopper and newer): {"state", "status"} as NVML
    gives them (nvmlDeviceGetGpuFabricInfoV, or the older nvmlDeviceGetGpuFabricInfo), or {"error"}
    ("Not Supported" where the GPU has no fabric to report)."""
    try:
        if hasattr(n, "nvmlDeviceGetGpuFabricInfoV") and hasattr(n, "c_nvmlGpuFabricInfo_v2_t"):
            info = n.c_nvmlGpuFabricInfo_v2_t()
            n.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        elif hasattr(n, "nvmlDeviceGetGpuFabricInfo"):
            info = n.c_nvmlGpuFabricInfo_t()
            n.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
        else:
            return {"error": "this nvidia-ml-py has no GPU fabric API (nvmlDeviceGetGpuFabricInfo)"}
    except n.NVMLError as exc:
        return {"error": str(exc)}
    # nvml.h declares the state an unsigned char; pynvml maps it on a wider integer
    return {"state": int(info.state) & 0xFF, "status": int(info.status)}


def module_state():
    # no module loaded: every field None (the checks then name what is missing)
    return nvidia_module() or {"version": None, "flavour": None, "banner": None}


def xid_lines():
    """NVRM Xid lines of this boot's kernel log (journalctl -k -b, else dmesg)."""
    for args in (["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"], ["dmesg"]):
        if not shutil.which(args[0]):
            continue
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if proc.returncode == 0 and proc.stdout.strip():
            return {"source": " ".join(args[:3]), "lines": [ln for ln in proc.stdout.splitlines() if "NVRM: Xid" in ln]}
    return {"error": "cannot read the kernel log (journalctl -k -b or dmesg; is the check run as root?)"}


def torch_state():
    import torch

    return {"version": torch.__version__, "cuda": torch.version.cuda, "arch_list": torch.cuda.get_arch_list()}


def section(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - each section reports its own failure
        return {"error": f"{type(exc).__name__}: {exc}"}


print(json.dumps({"python": sys.executable, "nvml": section(nvml_state), "module": section(module_state),
                  "xid": section(xid_lines), "torch": section(torch_state)}))
