"""A host's GPU interconnect in one JSON object: `nvidia-smi topo -m` as printed (parsed on the
control machine: llmfleet/gpu_interconnect.py), each GPU's NUMA node from sysfs, and peer-to-peer
access between every pair of GPUs through PyTorch: whether CUDA allows it, and a 64 MiB copy
from one GPU to the other that must arrive intact (with its bandwidth, for the report).

Run with the python of the vLLM environment (torch, nvidia-ml-py). Read-only: peer access is
enabled only inside this process, and nothing is set on any GPU.
"""

import json
import subprocess
import sys
import time


def topo():
    try:
        p = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    if p.returncode != 0:
        return {"error": (p.stdout + p.stderr).strip()[-500:]}
    return {"text": p.stdout}


def numa_nodes():
    """{pci bus id: NUMA node} from sysfs (-1: the firmware gives none)."""
    try:
        import pynvml as n

        n.nvmlInit()
        out = []
        for i in range(n.nvmlDeviceGetCount()):
            bus = n.nvmlDeviceGetPciInfo(n.nvmlDeviceGetHandleByIndex(i)).busId
            bus = (bus.decode() if isinstance(bus, bytes) else bus).lower()
            # NVML: 00000000:07:00.0; sysfs: 0000:07:00.0
            short = bus[-12:]
            try:
                node = int(open(f"/sys/bus/pci/devices/{short}/numa_node").read())
            except OSError:
                node = None
            out.append({"index": i, "bus_id": short, "numa_node": node})
        n.nvmlShutdown()
        return out
    except Exception as exc:
        return {"error": str(exc)}


def p2p():
    try:
        import torch
    except ImportError as exc:
        return {"error": f"no torch: {exc}"}
    count = torch.cuda.device_count()
    out = {}
    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            r = {"access": bool(torch.cuda.can_device_access_peer(i, j))}
            try:
                src = torch.arange(16 * 1024 * 1024, device=f"cuda:{i}", dtype=torch.float32)
                dst = torch.empty_like(src, device=f"cuda:{j}")
                dst.copy_(src)  # warm-up
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                t0 = time.perf_counter()
                for _ in range(5):
                    dst.copy_(src)
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                took = (time.perf_counter() - t0) / 5
                r["copy_ok"] = bool(torch.equal(dst.to(f"cuda:{i}"), src))
                r["copy_gbs"] = round(src.numel() * 4 / took / 1e9, 1)
                del src, dst
            except Exception as exc:
                r["copy_ok"] = False
                r["error"] = str(exc)[:300]
            out[f"{i}-{j}"] = r
    return out


if __name__ == "__main__":
    want = sys.argv[1:] or ["topo", "numa", "p2p"]
    state = {}
    if "topo" in want:
        state["topo"] = topo()
    if "numa" in want:
        state["numa"] = numa_nodes()
    if "p2p" in want:
        state["p2p"] = p2p()
    print(json.dumps(state))
