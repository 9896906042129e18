"""Run on a host (python3, standard library, as root): one instance of a serving layout in and out
of its front door's rotation, through HAProxy's runtime API (the admin socket of its
configuration; HAProxy 2.6 management guide, docs.haproxy.org/2.6/management.html: `set server`,
`show stat`).

  state  SOCKET BACKEND                 every server's state
  drain  SOCKET BACKEND NAME TIMEOUT_S  out of rotation (`set server B/N state drain`: no new
                                        requests, still health-checked), then wait until its
                                        current sessions (`show stat`, scur) are 0, at most TIMEOUT_S
  ready  SOCKET BACKEND NAME TIMEOUT_S  back in rotation (`set server B/N state ready`), then wait
                                        until its health check has it UP, at most TIMEOUT_S
  serving SOCKET BACKEND TIMEOUT_S      wait until every server is UP, at most TIMEOUT_S (after the
                                        front door started or took a new configuration); exits 1
                                        if not, naming each server's status
  weight SOCKET BACKEND NAME PERCENT    the server's weight, PERCENT of its configured one
                                        (`set weight B/N P%`: a canary's share, no reload), then
                                        read back (`get weight B/N`: "current (initial)")

Prints one JSON object: {"ok": bool, "seconds": float, "why": str, ...}; for state
{"servers": {name: {"status", "sessions"}}}. A front door that is not running, or that does not
have the server yet (an instance new in this deploy, added when its configuration is reloaded
after the roll), has nothing to drain: ok, with "skipped" saying why.
"""

import csv
import json
import socket
import sys
import time

POLL_S = 0.5


def ask(path, command):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode()


def servers(path, backend):
    """{name: {"status", "sessions"}} of the backend's servers (show stat: the CSV header names
    the fields; type 4 = servers)."""
    text = ask(path, f"show stat {backend} 4 -1")
    rows = list(csv.reader(line for line in text.splitlines() if line.strip()))
    if not rows or not rows[0] or not rows[0][0].startswith("# pxname"):
        raise ValueError(f"not a stat table: {text[:200]!r}")
    header = [h.lstrip("# ").strip() for h in rows[0]]
    at = {name: i for i, name in enumerate(header)}
    return {r[at["svname"]]: {"status": r[at["status"]], "sessions": int(r[at["scur"]] or 0) + int(r[at["qcur"]] or 0)}
            for r in rows[1:] if len(r) > at["status"] and r[at["pxname"]] == backend}


def done(start, ok, why="", **extra):
    print(json.dumps({"ok": ok, "seconds": round(time.monotonic() - start, 1), "why": why, **extra}))
    sys.exit(0)


def serving(path, backend, timeout_s, start):
    found = {}
    while time.monotonic() - start <= timeout_s:
        try:
            found = servers(path, backend)
        except (OSError, ValueError) as exc:
            found = {"(front door)": {"status": f"not answering: {exc}"}}
        if found and all(s["status"].startswith("UP") for s in found.values()):
            done(start, True, servers=found)
        time.sleep(POLL_S)
    print(json.dumps({"ok": False, "seconds": round(time.monotonic() - start, 1), "servers": found,
                      "why": f"not every instance UP in the front door within {timeout_s:.0f}s: " + ", ".join(
                          f"{name} {s['status']}" for name, s in sorted(found.items()))}))
    sys.exit(1)


def main(argv):
    command, path, backend = argv[0], argv[1], argv[2]
    start = time.monotonic()
    if command == "serving":
        serving(path, backend, float(argv[3]), start)
    try:
        found = servers(path, backend)
    except (OSError, ValueError) as exc:
        if command == "state":
            done(start, False, f"front door not answering on {path}: {exc}", servers={})
        done(start, True, skipped=f"front door not answering on {path} ({type(exc).__name__}): nothing to "
                                  f"{'drain' if command == 'drain' else 'put back'}")
    if command == "state":
        done(start, True, servers=found)
    if command == "weight":
        name, percent = argv[3], int(argv[4])
        if name not in found:
            done(start, False, f"the front door has no server {name}")
        answer = ask(path, f"set weight {backend}/{name} {percent}%").strip()
        now = ask(path, f"get weight {backend}/{name}").strip()
        if answer or not now[:1].isdigit():
            done(start, False, f"HAProxy refused `set weight {backend}/{name} {percent}%`: {(answer or now)[:200]}")
        done(start, True, weight=int(now.split()[0]))
    name, timeout_s = argv[3], float(argv[4])
    if name not in found:
        done(start, True, skipped=f"the front door has no server {name} yet (it is added when its configuration "
                                  "is reloaded)")
    answer = ask(path, f"set server {backend}/{name} state {'drain' if command == 'drain' else 'ready'}").strip()
    if answer:
        done(start, False, f"HAProxy refused `set server {backend}/{name}`: {answer[:200]}")
    while True:
        now = servers(path, backend).get(name, {})
        if command == "drain" and now.get("sessions", 0) == 0:
            done(start, True, sessions=0)
        if command == "ready" and now.get("status", "").startswith("UP"):
            done(start, True, status=now["status"])
        if time.monotonic() - start > timeout_s:
            if command == "drain":
                done(start, True, sessions=now.get("sessions"),
                     why=f"{now.get('sessions')} request(s) still in flight after {timeout_s:.0f}s "
                         "(vllm_drain_timeout_s): restarted anyway")
            done(start, False, f"not UP in the front door within {timeout_s:.0f}s (status {now.get('status')})")
        time.sleep(POLL_S)


main(sys.argv[1:])
