"""How long each start of the vLLM servers took to load their weights, as the servers' own log
lines say (python3, standard library; as root, to read the journal). Prints one JSON object:

    {UNIT: {"current": this start's invocation id, "active": ActiveState,
            "lines": [{"invocation", "at": microseconds since the epoch, "message"}]}}

    python3 vllm_loads.py UNIT [UNIT...]

Each start of a unit is one systemd invocation, and journald tags every line of its output with
that invocation's id: the lines of the starts still in the journal (the newest MAX_LINES that say
"took ... seconds") come back whole; llmfleet/vllm_logs.py reads the seconds out of them.
"""

import json
import subprocess
import sys

MAX_LINES = 400
PATTERN = "(Loading weights|Model loading) took"


def text(value):
    """journalctl -o json gives a message that is not UTF-8 as a list of byte values."""
    if isinstance(value, list):
        return bytes(v for v in value if isinstance(v, int)).decode("utf-8", "replace")
    return str(value or "")


def journal(unit):
    base = ["journalctl", "-u", unit, "-o", "json", "--no-pager", "-q",
            "--output-fields=MESSAGE,_SYSTEMD_INVOCATION_ID,__REALTIME_TIMESTAMP"]
    proc = subprocess.run([*base, "-g", PATTERN, "-n", str(MAX_LINES)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "pattern" in proc.stderr.lower():  # a journalctl built without PCRE2
        proc = subprocess.run([*base, "-n", "200000"], capture_output=True, text=True, timeout=120)
    lines = []
    for raw in proc.stdout.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        message = text(entry.get("MESSAGE"))
        if " took " not in message:
            continue
        lines.append({"invocation": entry.get("_SYSTEMD_INVOCATION_ID", ""),
                      "at": int(entry.get("__REALTIME_TIMESTAMP", 0)), "message": message[:300]})
    return lines[-MAX_LINES:], (proc.stderr.strip()[-300:] if proc.returncode not in (0, 1) else None)


def show(unit):
    proc = subprocess.run(["systemctl", "show", "-p", "InvocationID", "-p", "ActiveState", unit],
                          capture_output=True, text=True, timeout=60)
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


out = {}
for unit in sys.argv[1:]:
    props = show(unit)
    lines, error = journal(unit)
    out[unit] = {"current": props.get("InvocationID", ""), "active": props.get("ActiveState", ""), "lines": lines}
    if error:
        out[unit]["error"] = error
print(json.dumps(out))
