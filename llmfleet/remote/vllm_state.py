"""Run on a host by llmfleet.facts.VllmState (python3, standard library, as root). Argument: a
JSON object of paths. Prints one JSON object: what is deployed and active for vLLM."""

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


def systemctl(*args):
    return subprocess.run(["systemctl", *args, "vllm.service"], capture_output=True, text=True).stdout.strip()


print(json.dumps({
    "unit_sha256": sha(p["unit"]),
    "key_sha256": sha(p["key_file"]),
    "venv_target": link(p["venv_link"]),
    "model_target": link(p["model_link"]),
    "env_ready": os.path.exists(os.path.join(p["env_dir"], ".llmfleet-complete")),
    "model_ready": os.path.exists(os.path.join(p["model_dir"], ".llmfleet-verified")),
    "active": systemctl("is-active"),
    "enabled": systemctl("is-enabled"),
}))
