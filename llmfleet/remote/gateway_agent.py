"""Run on a serving host (python3, standard library, as root): set what the host's gateway agent
answers the fleet gateways (llmfleet/gateway.py: HAProxy's agent-check reads the state file), and
wait until the gateways have acted on it.

  drain STATE WAIT_S PORT TIMEOUT_S  "drain" (no new requests from any gateway), then WAIT_S (every
                                     gateway has asked the agent), then until the host's vLLM on
                                     PORT has no request running or waiting (its /metrics:
                                     vllm:num_requests_running, vllm:num_requests_waiting), at most
                                     TIMEOUT_S (vllm_drain_timeout_s: then restarted anyway, and
                                     "why" says how many were left); a server that does not answer
                                     has none
  ready STATE WAIT_S [PERCENT]       "ready 100%" (back in rotation at its weight), then WAIT_S (the
                                     gateways have asked the agent and their checks have the host up);
                                     with PERCENT, "ready PERCENT%" (a canary's share of the requests).
                                     Not while the host is held (below): "why" says by what
  hold STATE WAIT_S PORT TIMEOUT_S WHO  the host held out of rotation (`llmfleet tune`): WHO written
                                     to the hold file beside STATE, then as drain; until release, a
                                     "ready" (a roll's) leaves it drained
  release STATE WAIT_S               the hold file removed, then as ready

Prints one JSON object: {"ok": bool, "seconds": float, "why": str, "requests": the last count read
or None}. The state file is written whole (a temporary file renamed over it): an agent answering
meanwhile reads the old line or the new one.
"""

import json
import os
import re
import sys
import time
import urllib.request

START = time.monotonic()
POLL_S = 0.5
METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def write_state(path, line):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(line + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def in_flight(port):
    """Requests the host's vLLM runs or queues (the sum over its metric lines), or None when it does
    not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        if name in METRICS:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def done(ok, why="", requests=None):
    print(json.dumps({"ok": ok, "seconds": round(time.monotonic() - START, 1), "why": why, "requests": requests}))
    sys.exit(0)


def hold_file(state):
    return os.path.join(os.path.dirname(state), "hold")


action, state = sys.argv[1], sys.argv[2]
if action == "release":
    if os.path.exists(hold_file(state)):
        os.remove(hold_file(state))
    action = "ready"
if action == "ready":
    if os.path.exists(hold_file(state)):
        with open(hold_file(state)) as f:
            done(True, f"held out of rotation by {f.read().strip()}: left drained (the hold ends with its release)")
    percent = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    write_state(state, f"ready {percent}%")
    time.sleep(float(sys.argv[3]))
    done(True)
if action == "hold":
    write_state(hold_file(state), sys.argv[6])
    action = "drain"
if action != "drain":
    done(False, f"unknown action {action!r}")
wait_s, port, timeout_s = float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
write_state(state, "drain")
time.sleep(wait_s)
deadline = time.monotonic() + timeout_s
count = in_flight(port)
while count and time.monotonic() < deadline:
    time.sleep(POLL_S)
    count = in_flight(port)
if count:
    done(True, f"{count} request(s) still running or waiting after {timeout_s:g} s (vllm_drain_timeout_s): "
               "restarted anyway", count)
done(True, "drained" if count == 0 else "vLLM does not answer: nothing to wait for", count)
