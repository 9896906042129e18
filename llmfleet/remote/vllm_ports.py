"""Run on a host (as root, to see every process's sockets): which processes listen on the TCP
ports named in argv. Prints {"<port>": [{"pid", "command", "unit"}]}, a port nobody listens on
left out.

The listening sockets come from /proc/net/tcp and /proc/net/tcp6 (proc(5): state 0A is LISTEN,
local_address is ADDR:PORT in hex); a socket's inode names its holder through /proc/<pid>/fd
("socket:[<inode>]"); the holder's systemd unit is the last .service or .scope of its cgroup
path (/proc/<pid>/cgroup), so the deploy can tell its own service's socket from another's.
A socket listed but held by no process (one closing) has an empty holder list.
"""
import json
import os
import sys

from _helpers import rd

LISTEN = "0A"
wanted = {int(p) for p in sys.argv[1:]}
inodes: dict = {}
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if len(fields) > 9 and fields[3] == LISTEN:
                    port = int(fields[1].rsplit(":", 1)[1], 16)
                    if port in wanted:
                        inodes[fields[9]] = port
    except OSError:  # no IPv6 on this host
        continue


def unit_of(pid):
    for line in (rd(f"/proc/{pid}/cgroup") or "").splitlines():
        parts = [p for p in line.split(":", 2)[-1].split("/") if p.endswith((".service", ".scope"))]
        if parts:
            return parts[-1]
    return None


held: dict = {}
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            key = str(inodes[target[8:-1]])
            entry = {"pid": int(pid), "command": rd(f"/proc/{pid}/comm"), "unit": unit_of(pid)}
            if entry not in held.setdefault(key, []):
                held[key].append(entry)
for port in set(inodes.values()):
    held.setdefault(str(port), [])
print(json.dumps(held, sort_keys=True))
