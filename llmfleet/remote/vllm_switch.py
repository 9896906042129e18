"""Run on a host (python3, standard library, as root): switch vllm.service to what the deploy
staged, or back to what it served before.

  switch --record R --service S... [--systemctl CMD] [--keep DIR] [--unit P]... [--file P]...
         [--remove P]... [--link P]... [--no-restart]
  back   --record R --service S... [--systemctl CMD] [--no-restart]

switch: each `--unit`/`--file` P takes the content staged at DIR/<name of P>.new (its previous
content is kept as DIR/<name of P>.prev); each `--remove` P is kept the same way and removed;
each `--link` P is replaced, atomically, by the link staged beside it (P.new). What it switched is
written to R (JSON); then `systemctl daemon-reload` (only when the unit's content changed),
`enable`, `reset-failed` and `restart` of each S.
back: undoes what R says the last switch did (the previous content, link target, or absence)
and restarts each S.
With --no-restart the files and links are switched (and units reloaded) but no S is enabled or
restarted: a serving layout's roll restarts its instances one at a time itself.

`--systemctl` is the command run for systemctl (default `systemctl`). Prints one JSON object
{"ok": bool, "switched": [paths], "reloaded": bool, "why": str} and exits 1 when not ok.
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys


def systemctl(cmd, *args):
    proc = subprocess.run([*shlex.split(cmd), *args], capture_output=True, text=True)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def put(src, path):
    """Copy src over path atomically (a copy beside path, renamed over it); mode bits kept."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".llmfleet-tmp")
    shutil.copy2(src, tmp)
    os.replace(tmp, path)


def relink(path, target):
    tmp = path + ".llmfleet-tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def remove(path):
    if os.path.lexists(path):
        os.unlink(path)


def restart(a, reload_units):
    if reload_units:
        ok, out = systemctl(a.systemctl, "daemon-reload")
        if not ok:
            return f"systemctl daemon-reload failed: {out[-300:]}"
    if a.no_restart:
        return ""
    for service in a.service:
        if a.command == "switch":
            ok, out = systemctl(a.systemctl, "enable", "-q", service)
            if not ok:
                return f"systemctl enable {service} failed: {out[-300:]}"
        systemctl(a.systemctl, "reset-failed", service)  # fails when the unit has not failed: that is fine
        ok, out = systemctl(a.systemctl, "restart", service)
        if not ok:
            return f"systemctl restart {service} failed: {out[-300:]}"
    return ""


def switch(a):
    os.makedirs(a.keep, mode=0o755, exist_ok=True)
    missing = [f"{p} (at {os.path.join(a.keep, os.path.basename(p) + '.new')})" for p in a.unit + a.file
               if not os.path.exists(os.path.join(a.keep, os.path.basename(p) + ".new"))]
    missing += [f"the link {p} (at {p}.new)" for p in a.link if not os.path.islink(p + ".new")]
    if missing:  # nothing is changed unless everything is staged
        return [], False, "nothing staged for " + ", ".join(missing)
    items, reload_units = [], False
    for kind, paths in (("unit", a.unit), ("file", a.file), ("remove", a.remove)):
        for path in paths:
            staged = os.path.join(a.keep, os.path.basename(path) + ".new")
            prev = os.path.join(a.keep, os.path.basename(path) + ".prev")
            remove(prev)
            if os.path.exists(path):
                shutil.copy2(path, prev)
            items.append({"kind": "unit" if kind == "unit" else "file", "path": path,
                          "prev": prev if os.path.exists(prev) else None})
            if kind == "remove":
                remove(path)
                continue
            if kind == "unit":
                reload_units |= read(staged) != read(path)
            put(staged, path)
            remove(staged)
    for path in a.link:
        items.append({"kind": "link", "path": path, "was": os.readlink(path) if os.path.islink(path) else None})
        os.replace(path + ".new", path)
    with open(a.record, "w") as f:
        json.dump({"service": a.service, "items": items}, f, indent=1)
    os.chmod(a.record, 0o600)
    return [i["path"] for i in items], reload_units, ""


def back(a):
    with open(a.record) as f:
        items = json.load(f)["items"]
    reload_units = False
    for item in items:
        path = item["path"]
        if item["kind"] == "link":
            relink(path, item["was"]) if item["was"] else remove(path)
            continue
        before = read(path)
        put(item["prev"], path) if item["prev"] else remove(path)
        reload_units |= item["kind"] == "unit" and read(path) != before
    return [i["path"] for i in items], reload_units, ""


parser = argparse.ArgumentParser(prog="vllm_switch")
parser.add_argument("command", choices=["switch", "back"])
parser.add_argument("--record", required=True)
parser.add_argument("--service", action="append", required=True)
parser.add_argument("--systemctl", default="systemctl")
parser.add_argument("--keep", default="")
parser.add_argument("--unit", action="append", default=[])
parser.add_argument("--no-restart", action="store_true")
parser.add_argument("--file", action="append", default=[])
parser.add_argument("--remove", action="append", default=[])
parser.add_argument("--link", action="append", default=[])
args = parser.parse_args(sys.argv[1:])
if args.command == "switch" and not args.keep:
    parser.error("switch needs --keep DIR (where the staged and previous files are)")
try:
    switched, reloaded, why = (switch if args.command == "switch" else back)(args)
    if not why:
        why = restart(args, reloaded)
except OSError as exc:
    switched, reloaded, why = [], False, f"{type(exc).__name__}: {exc}"
print(json.dumps({"ok": not why, "switched": switched, "reloaded": reloaded, "why": why}))
sys.exit(1 if why else 0)
