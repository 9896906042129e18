"""Run on a host by llmfleet.facts.VllmState (python3, standard library, as root). Argument: a
JSON object of paths. Prints one JSON object: what is deployed and active for vLLM; with a
serving layout ("units": the instances' unit paths) also each instance unit's sha256 and state,
and every vllm-*.service llmfleet left in /etc/systemd/system (an instance the layout dropped)."""

import glob
import hashlib
import json
import os
import subprocess
import sys

p = json.loads(sys.argv[1])


def sha(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def link(path):
    return os.readlink(path) if os.path.islink(path) else None


def systemctl(*args, unit="vllm.service"):
    return subprocess.run(["systemctl", *args, unit], capture_output=True, text=True).stdout.strip()


def unit_state(path):
    name = os.path.basename(path)
    return {"sha256": sha(path), "active": systemctl("is-active", unit=name), "enabled": systemctl("is-enabled",
                                                                                                   unit=name)}


print(json.dumps({
    "unit_sha256": sha(p["unit"]),
    "key_sha256": sha(p["key_file"]),
    "venv_target": link(p["venv_link"]),
    "model_target": link(p["model_link"]),
    "env_ready": os.path.exists(os.path.join(p["env_dir"], ".llmfleet-complete")),
    "model_ready": os.path.exists(os.path.join(p["model_dir"], ".llmfleet-verified")),
    "active": systemctl("is-active"),
    "enabled": systemctl("is-enabled"),
    **({"units": {os.path.basename(u): unit_state(u) for u in p["units"]},
        "instance_units": sorted(os.path.basename(u) for u in glob.glob("/etc/systemd/system/vllm-*.service"))}
       if "units" in p else {}),
}))
