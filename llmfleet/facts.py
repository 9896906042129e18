"""pyinfra facts llmfleet's operations decide on (each one remote command, read before changes).

The facts that need more than a shell line run a host script of llmfleet/remote/ through
`llmfleet.remote.python_script`.

Preflight facts (`Preflight`) are also what onboarding and audits record about a host:

    pyinfra inventories/lab.py fact llmfleet.facts.Preflight
"""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase

from llmfleet.remote import python_script, source_sha256
from llmfleet.vllm import FLAG_ANSWERS_DIR


class IsContainer(FactBase[bool]):
    """True on a container host (it shares the kernel of the machine it runs on)."""

    def command(self) -> str:
        return "systemd-detect-virt --container 2>/dev/null || true"

    def process(self, output) -> bool:
        value = "\n".join(output).strip()
        return value not in ("", "none")


class Account(FactBase):
    """A local account's home and shell (getent), and its home directory's owner and group (None:
    no such account). Cheaper than pyinfra's Users fact, which runs several commands per account."""

    def command(self, user: str) -> str:
        q = shlex.quote(user)
        return (f"getent passwd {q} | cut -d: -f6,7 || true; h=$(getent passwd {q} | cut -d: -f6); "
                "if [ -n \"$h\" ] && [ -d \"$h\" ]; then stat -L -c '%U:%G' \"$h\"; fi")

    def process(self, output) -> dict | None:
        lines = [ln.strip() for ln in output if ln.strip()]
        if not lines or ":" not in lines[0]:
            return None
        home, _, shell = lines[0].partition(":")
        return {"home": home, "shell": shell, "home_owner": lines[1] if len(lines) > 1 else None}


class BootState(FactBase[dict]):
    """This boot's id, the running kernel command line, and whether a package asked for a reboot."""

    def command(self) -> str:
        return ("cat /proc/sys/kernel/random/boot_id; cat /proc/cmdline; "
                "if [ -e /run/reboot-required ]; then echo reboot-required; else echo no; fi")

    def process(self, output) -> dict:
        lines = list(output)
        return {"boot_id": lines[0].strip(), "cmdline": lines[1].split(),
                "reboot_required": lines[2].strip() == "reboot-required"}


class SysfsValues(FactBase[dict]):
    """Content and writability of sysfs/procfs files: {path: {"value": str|None, "writable": bool}}."""

    def command(self, paths: list[str]) -> str:
        quoted = " ".join("'" + p.replace("'", "") + "'" for p in paths)
        return (f"for p in {quoted}; do if [ -e \"$p\" ]; then "
                "if [ -w \"$p\" ]; then w=rw; else w=ro; fi; printf '%s\\t%s\\t%s\\n' \"$p\" $w \"$(cat \"$p\")\"; "
                "else printf '%s\\tmissing\\t\\n' \"$p\"; fi; done")

    def process(self, output) -> dict:
        out = {}
        for line in output:
            path, mode, value = (line.split("\t", 2) + ["", ""])[:3]
            out[path] = {"value": None if mode == "missing" else value, "writable": mode == "rw"}
        return out


class Preflight(FactBase[dict]):
    """OS and version, kernel, CPU sockets and NUMA nodes, PCI devices (class, vendor, device)."""

    def command(self) -> str:
        return python_script("onboard_preflight")

    def process(self, output) -> dict:
        return json.loads("\n".join(output))


class NvidiaHost(FactBase[dict]):
    """The host's NVIDIA state, in one round trip: GPUs and NVSwitches on the PCI bus, the loaded kernel module
    (version, flavour), installed and held driver/CUDA/DCGM packages, DKMS for the running kernel,
    and (where nvidia-smi answers) each GPU's application clocks and the supported clock pairs.

    {"os": "ubuntu", "os_version": "22.04", "kernel": "...", "pci_gpus": [{"slot", "device"}],
     "pci_nvswitches": [{"slot", "device"}],
     "module": {"version": "580.95.05", "flavour": "proprietary", "banner": "NVRM version: ..."} | None,
     "packages": {name: version}, "held": [names], "dkms": [lines for the running kernel],
     "smi": [{"index", "app_memory", "app_graphics", "persistence"}], "supported_clocks": [[mem, gfx]]}
    """

    def command(self) -> str:
        return python_script("nvidia_driver_host")

    def process(self, output) -> dict:
        return json.loads("\n".join(output))


class VllmState(FactBase[dict]):
    """What is deployed and active for vLLM: the unit's and API key file's sha256, where the
    environment and model links point, whether the versioned environment and model are complete,
    and the unit's state. Argument: {"unit", "key_file", "venv_link", "model_link", "env_dir", "model_dir"}."""

    def command(self, paths: dict) -> str:
        return python_script("vllm_state", json.dumps(paths, sort_keys=True))

    def process(self, output) -> dict:
        return json.loads("\n".join(output))


class NumaNodes(FactBase[dict]):
    """The host's NUMA nodes and their CPUs: {node: "cpulist"} from
    /sys/devices/system/node/node<N>/cpulist; a kernel without NUMA support (no such folder) has
    one node, 0, with every online CPU."""

    def command(self) -> str:
        return ("if ls -d /sys/devices/system/node/node[0-9]* >/dev/null 2>&1; then "
                "for d in /sys/devices/system/node/node[0-9]*; do echo \"${d##*/node} $(cat \"$d/cpulist\")\"; done; "
                "else echo \"0 $(cat /sys/devices/system/cpu/online)\"; fi")

    def process(self, output) -> dict:
        nodes = {}
        for line in output:
            node, _, cpus = line.strip().partition(" ")
            if node.isdigit():
                nodes[int(node)] = cpus.strip()
        return nodes


class PortHolders(FactBase[dict]):
    """The processes listening on TCP ports (llmfleet/remote/vllm_ports.py; needs root to see
    every process): {"<port>": [{"pid", "command", "unit"}]}, a port nobody listens on left out."""

    def command(self, ports: list[int]) -> str:
        return python_script("vllm_ports", *(str(p) for p in ports))

    def process(self, output) -> dict:
        return json.loads("\n".join(output))


class VllmEnvironment(FactBase[dict]):
    """A vLLM environment against the record of what it held when it was made
    (`<env>/.llmfleet-packages.json`, llmfleet/remote/vllm_env_record.py):
    {"exists", "recorded", "added": {name: version}, "removed": {name: version},
     "changed": {name: [recorded, actual]}}."""

    def command(self, env_dir: str) -> str:
        return python_script("vllm_env_record", env_dir, "diff")

    def process(self, output) -> dict:
        return json.loads("\n".join(output))


class VllmFlags(FactBase[dict]):
    """The vLLM server's flags as the vLLM in an environment reads them at start, in the unit's
    environment `env`: its argument parser, then its configuration classes, without loading weights
    (llmfleet/remote/vllm_flags.py, run with the environment's `python`): {"version", "ok",
    "unknown", "options", "error", "config", "config_error", "note", "seconds", "reused"}, or
    {"unreadable": output} when the parser could not run. An answer that passed is kept on the host
    (vllm.FLAG_ANSWERS_DIR) and reused for the same vLLM, arguments, environment and model config:
    "reused" is then the time of the check that gave it."""

    def command(self, python: str, args: list[str], env: dict[str, str] | None = None,
                answers_dir: str = FLAG_ANSWERS_DIR) -> str:
        # from / (no folder of the login user on sys.path); stderr holds vLLM's logging and warnings
        reuse = {"dir": answers_dir, "script": source_sha256("vllm_flags")}
        script = python_script("vllm_flags", json.dumps(args), json.dumps(env or {}), json.dumps(reuse),
                               python=python)
        return f"cd / && {{ {script}\n}} 2>/dev/null || true"

    def process(self, output) -> dict:
        lines = [line for line in output if line.strip()]
        try:
            return json.loads(lines[-1])
        except (ValueError, IndexError):
            return {"unreadable": "\n".join(lines) or "no output (is the environment's python there?)"}


class HardwareFingerprint(FactBase[dict]):
    """What a swapped or degraded part would change: system and CPU, memory, GPUs (serial, VBIOS,
    PCI slot, PCIe width, memory), NVLink topology, driver, disks. Recorded at onboarding; audits
    compare it (llmfleet/audit/fingerprint.py)."""

    def command(self) -> str:
        return python_script("audit_fingerprint")

    def process(self, output) -> dict:
        return json.loads("\n".join(output))


class ModelStorage(FactBase[dict]):
    """The speed of the filesystem that holds ``path`` (or its nearest existing parent), measured with fio
    (llmfleet/remote/model_storage.py; judged by llmfleet/model_storage.py): {"seq_read", "rand_read", ...}, or
    {"error", "missing": "fio"} on a host without fio. Writes a test file of ``size_mib`` and removes it."""

    def command(self, path: str, size_mib: str, runtime_s: str) -> str:
        return python_script("model_storage", path, str(size_mib), str(runtime_s))

    def process(self, output) -> dict:
        return json.loads("\n".join(output))


class DiskFree(FactBase[dict]):
    """Free and total space (bytes) of the filesystem that holds ``path`` (or its nearest existing parent)."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (f"p={q}; while [ ! -e \"$p\" ]; do p=$(dirname \"$p\"); done; "
                "df -Pk \"$p\" | awk 'NR==2 {print $4, $2, $6}'")  # KiB: awk would print bytes as 2.6e+11

    def process(self, output) -> dict:
        free, total, mount = "\n".join(output).split()[:3]
        return {"free": int(free) * 1024, "total": int(total) * 1024, "mount": mount}


class ManagedDropins(FactBase[dict]):
    """Foreign files in the drop-in chains of the managed files (`entries`: a JSON list of
    {"path"[, "folder", "content"]}) that override a managed key, as
    llmfleet/remote/managed_files_dropins.py finds them: {"overrides": [{"managed", "folder", "file",
    "line", "key", "value", "managed_value"}], "unreadable": [...]}."""

    def command(self, entries: str) -> str:
        return python_script("managed_files_dropins", entries)

    def process(self, output) -> dict:
        return json.loads("\n".join(output))
