"""DCGM's diagnostics on this host (python3, standard library only): `dcgmi diag -r LEVEL -j`,
stopped after TIMEOUT_S. Prints one JSON object: {"level", "rc", "seconds", "json": dcgmi's JSON}
or {"error": why it gave none}. Read by llmfleet/dcgm_exporter.py.

    python3 dcgm_exporter_diag.py LEVEL TIMEOUT_S

dcgmi talks to DCGM's host engine (nvidia-dcgm.service, installed by the dcgm_exporter component);
without one it starts an embedded engine. The diagnostics load the GPUs (level 3 for about 15
minutes) and change no setting.
"""

import json
import shutil
import subprocess
import sys
import time


def main(argv):
    level, timeout_s = int(argv[1]), int(argv[2])
    out = {"level": level}
    if not shutil.which("dcgmi"):
        out["error"] = ("dcgmi is not installed (DCGM 4: datacenter-gpu-manager-4-core, installed by the "
                        "dcgm_exporter component)")
        return out
    started = time.monotonic()
    try:
        proc = subprocess.run(["dcgmi", "diag", "-r", str(level), "-j"], capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out["error"] = f"dcgmi diag -r {level} did not finish within {timeout_s} s (dcgm_diag_timeout_s)"
        return out
    out["rc"] = proc.returncode
    out["seconds"] = round(time.monotonic() - started, 1)
    text = proc.stdout
    try:
        out["json"] = json.loads(text[text.index("{"):])
    except ValueError:
        out["error"] = (f"dcgmi diag -r {level} -j exited {proc.returncode} without JSON: "
                        + (proc.stderr.strip() or text.strip())[-600:])
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv)))
