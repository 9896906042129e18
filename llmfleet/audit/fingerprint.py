"""The hardware fingerprint: read from every host in one round trip (llmfleet.facts.HardwareFingerprint),
recorded at onboarding in <state dir>/hosts/<host>/fingerprint.json, compared by audits.

A reading also tells which hosts are reachable: a host that does not answer is reported as
unreachable, never as clean."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from llmfleet.audit.model import Problem
from llmfleet.errors import AuditError
from llmfleet.inventory import ROOT, limit_args, unmatched

# memory as the kernel reports it moves a little with kernel versions and reservations
MEMORY_TOLERANCE = 0.02
GPU_FIELDS = {  # field -> what a change means
    "name": "a different GPU model",
    "serial": "a swapped GPU",
    "uuid": "a swapped GPU",
    "vbios_version": "a different VBIOS (a swapped or reflashed GPU)",
    "pci.bus_id": "the GPU moved to another PCI slot",
    "pcie.link.gen.max": "the PCIe link trains to a lower generation (riser, slot or BIOS setting)",
    "pcie.link.width.max": "the PCIe link is narrower (an x8 slot or a bad riser)",
    "memory.total": "different GPU memory",
    "device": "a different GPU model",
}


def read(inventory: str, limit: list[str] | None) -> tuple[dict[str, dict], dict[str, str]]:
    """({host: fingerprint} of the hosts that answered, {host: why not} of those that did not)."""
    args = [sys.executable, "-m", "pyinfra", inventory, "fact", "llmfleet.facts.HardwareFingerprint", "--json", "-y"]
    if limit:
        args += limit_args(limit)
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=900)
    unmatched(proc.stderr)
    try:
        start = proc.stdout.index("{")
        data = json.loads(proc.stdout[start:])
    except ValueError:
        if "No hosts remaining" in proc.stderr:
            data = {}
        else:
            raise AuditError(f"reading the hardware fingerprint failed: {proc.stderr.strip()[-800:]}") from None
    # pyinfra's fact JSON: {fact name: {host: value}}; a host that did not answer has no value
    values = data.get("llmfleet.facts.HardwareFingerprint", {})
    found = {h: v for h, v in values.items() if isinstance(v, dict)}
    why: dict[str, str] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"\s*\[([^\]]+)\]\s+(.*)", line)
        if m and m.group(1) not in found and ("connect" in line.lower() or "error" in line.lower()):
            why.setdefault(m.group(1), m.group(2).strip())
    return found, why


def repair(inventory: str, host: str) -> str:
    """What to do about a hardware difference (a deploy cannot repair a part)."""
    return (f"check the part on {host}; if the change is intended, record the hardware again: "
            f"llmfleet onboard {inventory} --limit {host} --restart")


def state_dir(value: str | None = None) -> Path:
    """The control machine's record of the fleet (fingerprints, acceptance results): ``value``, else
    $LLMFLEET_STATE_DIR, else fleet/ (beside the inventories)."""
    return Path(value or os.environ.get("LLMFLEET_STATE_DIR") or "fleet")


def path_for(state_dir: Path, host: str) -> Path:
    return state_dir / "hosts" / host / "fingerprint.json"


def record(state_dir: Path, host: str, fingerprint: dict) -> Path:
    p = path_for(state_dir, host)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")
    return p


def load(state_dir: Path, host: str) -> dict | None:
    p = path_for(state_dir, host)
    return json.loads(p.read_text()) if p.is_file() else None


def compare(host: str, recorded: dict, now: dict) -> list[Problem]:
    """Every difference between the recorded fingerprint and the current one, named."""
    out: list[Problem] = []

    def add(check: str, expected, actual, why: str):
        out.append(Problem(host, "hardware", f"hardware: {check}", f"{check}: {why}", expected, actual, what=check,
                           why=why))

    for key in ("vendor", "product", "serial"):
        a, b = recorded.get("system", {}).get(key), now.get("system", {}).get(key)
        if a != b:
            add(f"system.{key}", a, b, "a different machine or mainboard")
    for key in ("model", "count", "sockets"):
        a, b = recorded.get("cpu", {}).get(key), now.get("cpu", {}).get(key)
        if a != b:
            add(f"cpu.{key}", a, b, "different CPUs (or CPUs offline)")
    a, b = recorded.get("memory_kib"), now.get("memory_kib")
    if a and b and abs(a - b) / a > MEMORY_TOLERANCE:
        add("memory_kib", a, b, f"memory differs by more than {MEMORY_TOLERANCE:.0%} (a DIMM failed or was removed)")
    old, new = recorded.get("gpus", []), now.get("gpus", [])
    if len(old) != len(new):
        add("gpus.count", len(old), len(new), "a GPU is missing (fallen off the bus?)" if len(new) < len(old)
            else "more GPUs than recorded")
    for i, (g0, g1) in enumerate(zip(old, new, strict=False)):
        for f, why in GPU_FIELDS.items():
            if g0.get(f) != g1.get(f):
                add(f"gpus[{i}].{f}", g0.get(f), g1.get(f), why)
    if recorded.get("nvlink") != now.get("nvlink"):
        before, after = recorded.get("nvlink") or {}, now.get("nvlink") or {}
        links = sorted({(r, c) for m in (before, after) for r, row in m.items() for c in row
                        if before.get(r, {}).get(c) != after.get(r, {}).get(c)})
        names = [f"{r}-{c}" for r, c in links]
        add("nvlink", {f"{r}-{c}": before.get(r, {}).get(c) for r, c in links},
            {f"{r}-{c}": after.get(r, {}).get(c) for r, c in links},
            f"the GPU interconnect differs ({', '.join(names[:8]) or 'topology'}): an NVLink down?")
    if recorded.get("driver") != now.get("driver"):
        add("driver", recorded.get("driver"), now.get("driver"), "a different NVIDIA driver is loaded")
    d0 = {d["name"]: d for d in recorded.get("disks", [])}
    d1 = {d["name"]: d for d in now.get("disks", [])}
    for name in sorted(set(d0) | set(d1)):
        if d0.get(name) != d1.get(name):
            add(f"disks.{name}", d0.get(name), d1.get(name), "a disk was replaced, resized or is missing")
    return out


def field_count(fingerprint: dict) -> int:
    return 8 + len(fingerprint.get("gpus", [])) * len(GPU_FIELDS) + len(fingerprint.get("disks", []))
