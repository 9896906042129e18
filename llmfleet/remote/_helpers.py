"""What the host scripts of llmfleet/remote/ share (`from _helpers import ...`; python_script sends
it along with every script): small helpers, and the readers of host state more than one script
needs. Standard library only, for any python3 a host has."""

import glob
import os
import re
import subprocess


def sh(args):
    """A command's stdout, or "" when it is missing, fails or takes over 60 s."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        return proc.stdout if proc.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def rd(path):
    """A file's stripped content, or None when it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


# PCI vendor 0x10de is NVIDIA; classes 0x0300 (VGA) and 0x0302 (3D controller: datacenter GPUs).
# Source: the PCI ID repository (https://pci-ids.ucw.cz/read/PC/03, .../read/PD/10de).
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")


def pci_devices(devices="/sys/bus/pci/devices"):
    """Every PCI device (sysfs, as `lspci -n` lists them): [{"slot", "class", "vendor", "device"}], in slot order."""
    return [{"slot": os.path.basename(d), "class": rd(d + "/class"), "vendor": rd(d + "/vendor"),
             "device": rd(d + "/device")} for d in sorted(glob.glob(devices + "/*"))]


def pci_gpus(devices="/sys/bus/pci/devices"):
    """The NVIDIA GPUs on the PCI bus, whether or not a driver sees them (as `lspci -d 10de:` shows
    them): [{"slot", "device", "max_link_width"}], in slot order."""
    return [{"slot": p["slot"], "device": p["device"], "max_link_width": rd(f"{devices}/{p['slot']}/max_link_width")}
            for p in pci_devices(devices)
            if p["vendor"] == NVIDIA_VENDOR and (p["class"] or "").startswith(GPU_CLASSES)]


# NVSwitch chips: vendor 0x10de, class 0x0680 ("Bridge: other"), e.g. 10de:1af1 "GA100 [A100 NVSwitch]",
# 10de:22a3 "GH100 [H100 NVSwitch]" (pci.ids; lspci -nn of an HGX H100: four of them). NVIDIA's nForce
# chipsets of the 2000s used that class for their Ethernet: never on a GPU server.
NVSWITCH_CLASS = "0x0680"


def pci_nvswitches(devices="/sys/bus/pci/devices"):
    """The NVSwitches on the PCI bus, whether or not a driver sees them: [{"slot", "device"}], in slot order."""
    return [{"slot": p["slot"], "device": p["device"]} for p in pci_devices(devices)
            if p["vendor"] == NVIDIA_VENDOR and (p["class"] or "").startswith(NVSWITCH_CLASS)]


def nvidia_module(version_file="/sys/module/nvidia/version", banner_file="/proc/driver/nvidia/version"):
    """The loaded NVIDIA kernel module: {"version", "flavour": "open" | "proprietary", "banner": the
    driver's first line}, or None when none is loaded. The open modules say "Open Kernel Module" in
    /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05 ...")."""
    version, banner = rd(version_file), rd(banner_file) or ""
    if not (version or banner):
        return None
    m = re.search(r"Kernel Module(?: for \S+)?\s+([0-9.]+)", banner)
    return {"version": version or (m.group(1) if m else None),
            "flavour": "open" if "Open Kernel Module" in banner else "proprietary",
            "banner": banner.splitlines()[0] if banner else None}


def distributions(paths):
    """The Python distributions installed in `paths` (site-packages folders) as importlib.metadata
    finds them: {name: version}, the name normalised as pip does (PEP 503: lower case, runs of -_.
    as one -). Each one's metadata file is read once and only its headers parsed, with the email
    parser importlib.metadata itself uses (Distribution.metadata: METADATA, else PKG-INFO; the
    headers end at the first empty line): `dist.metadata` parses the whole file, the long
    description after the headers included, each time it is asked, and `dist.version` asks again.
    A vLLM environment's 149 distributions: 56 ms of the host's CPU that way, 13 ms this way."""
    import email.parser
    import importlib.metadata

    parser = email.parser.HeaderParser()
    found = {}
    for dist in importlib.metadata.distributions(path=paths):
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("") or ""
        headers = parser.parsestr(text.split("\n\n", 1)[0])
        if headers["Name"]:
            found[re.sub(r"[-_.]+", "-", headers["Name"]).lower()] = headers["Version"]
    return found


def api_key(key_file):
    """The API key in vLLM's key file (its VLLM_API_KEY= line), None when key_file is "-" (no key).
    Read on the host, as root; the scripts never print it."""
    key = None
    if key_file != "-":
        with open(key_file) as f:
            for line in f:
                if line.startswith("VLLM_API_KEY="):
                    key = line.split("=", 1)[1].strip()
    return key


def nvml_gpu_count():
    """The GPUs NVML counts (nvidia-ml-py: imported here, for the scripts run with the vLLM
    environment's python, which has it), NVML shut down again before any rank is forked. Raises what
    NVML raises (ImportError without nvidia-ml-py)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


def run_ranks(target, args_of, world, timeout_s, dependent):
    """One forked process per rank, ``target(rank, *args_of(rank), queue)``, each putting (rank,
    reply) on the queue; their replies within ``timeout_s``. Waiting ends early once a rank that has
    not answered exited: one that failed, where the ranks wait for each other (``dependent``: an
    all-reduce), or all of them (each GPU on its own). Processes left are killed. Returns (replies by
    rank, exit codes by rank, seconds)."""
    import multiprocessing as mp
    import time
    from queue import Empty

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, *args_of(r), queue)) for r in range(world)]
    started = time.monotonic()
    for p in procs:
        p.start()
    replies = {}
    while len(replies) < world and time.monotonic() - started < timeout_s:
        try:
            rank, reply = queue.get(timeout=1.0)
            replies[rank] = reply
        except Empty:
            waiting = [p for r, p in enumerate(procs) if r not in replies]
            if (any(p.exitcode not in (None, 0) for p in waiting) if dependent
                    else all(p.exitcode is not None for p in waiting)):
                break
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
    return replies, [p.exitcode for p in procs], round(time.monotonic() - started, 1)
