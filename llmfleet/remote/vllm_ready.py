"""Run on a host (python3, standard library, as root): wait until vLLM is ready, i.e. /health
answers 200 and a 1-token completion comes back (/health can answer while the engine is hung:
vLLM issues #39863, PR #36451). Arguments: port, served model name, timeout in seconds, the
NRestarts of the unit when it was (re)started, the API key file (or "-"), and optionally the unit
(default vllm.service; an instance of a layout: vllm-<name>.service on its own port).
Prints one JSON object: {"ok": bool, "seconds": float, "why": str}. Never prints the key.
"""

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

from _helpers import api_key  # llmfleet/remote/_helpers.py, sent along by python_script

# between two looks (the unit's state, then /health): a restart's wait ends within this of ready,
# and each look costs two `systemctl show` and one request on the host
POLL_S = 0.5

port, name, timeout_s, restarts0, key_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), \
    sys.argv[5]
service = sys.argv[6] if len(sys.argv) > 6 else "vllm.service"
key = api_key(key_file)
base = f"http://127.0.0.1:{port}"
start = time.monotonic()


def unit(prop):
    return subprocess.run(["systemctl", "show", "-p", prop, "--value", service], capture_output=True,
                          text=True).stdout.strip()


def journal():
    """The server's own error line (the last line naming an error that is not systemd's), then the
    last lines of its log."""
    out = subprocess.run(["journalctl", "-u", service, "-n", "40", "--no-pager", "-o", "cat"],
                         capture_output=True, text=True).stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    own = [line for line in lines if re.search(r"[A-Za-z]*Error\b|\berror\b", line)
           and not line.startswith((service + ":", "File ", "[", "Stopped ", "Started "))]
    tail = " | ".join(lines[-6:])[-600:]
    return (f"{own[-1][:400]} (log tail: {tail})") if own else f"log tail: {tail}"


def done(ok, why=""):
    print(json.dumps({"ok": ok, "seconds": round(time.monotonic() - start, 1), "why": why}))
    sys.exit(0)


last = "no answer yet"
while time.monotonic() - start < timeout_s:
    restarts, state = int(unit("NRestarts") or 0), unit("ActiveState")
    if restarts > restarts0 or state == "failed":
        done(False, f"{service} exited while starting ({state}, {restarts - restarts0} restart(s)); "
                    f"{journal()}")
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            health = r.status
        if health == 200:
            body = json.dumps({"model": name, "prompt": "ping", "max_tokens": 1}).encode()
            req = urllib.request.Request(base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            if key:
                req.add_header("Authorization", "Bearer " + key)
            with urllib.request.urlopen(req, timeout=30) as r:
                answer = json.load(r)
            if answer.get("usage", {}).get("completion_tokens") == 1:
                done(True)
            last = f"completion without a token: {str(answer)[:200]}"
    except urllib.error.HTTPError as exc:
        last = f"HTTP {exc.code} from {exc.url}"
    except (OSError, ValueError) as exc:
        last = f"{type(exc).__name__}: {exc}"
    time.sleep(POLL_S)
done(False, f"not ready within {timeout_s:.0f}s (vllm_ready_timeout_s); last: {last}; {journal()}")
