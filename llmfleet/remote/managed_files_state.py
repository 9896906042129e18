"""Run on a host (as root) by the verify suite: the deploy's manifest of what it manages
(llmfleet/managed_files.py's MANIFEST, the first argument) and what the host has at each of its
paths. Prints {"manifest": "present" | "missing" | "unreadable: why", "entries": [...],
"found": {path: {"kind": file|link|directory|other|missing, "sha256", "mode", "user", "group",
"target"}}}. A file's content is hashed, never printed (the manifest lists secrets too)."""

import grp
import hashlib
import json
import os
import pwd
import stat
import sys


def name_of(table, number):
    try:
        return table(number)[0]
    except KeyError:
        return str(number)


def found(path):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"kind": "missing"}
    except OSError as exc:
        return {"kind": "other", "why": str(exc)}
    out = {"mode": f"{stat.S_IMODE(st.st_mode):04o}", "user": name_of(pwd.getpwuid, st.st_uid),
           "group": name_of(grp.getgrgid, st.st_gid)}
    if stat.S_ISLNK(st.st_mode):
        out.update(kind="link", target=os.readlink(path))
        out.pop("mode")  # a link's own mode means nothing on Linux
    elif stat.S_ISDIR(st.st_mode):
        out["kind"] = "directory"
    elif stat.S_ISREG(st.st_mode):
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            out.update(kind="file", sha256=digest.hexdigest())
        except OSError as exc:
            out.update(kind="file", sha256=None, why=str(exc))
    else:
        out["kind"] = "other"
    return out


manifest = sys.argv[1]
try:
    with open(manifest) as fh:
        entries = json.load(fh)["entries"]
    state = "present"
except FileNotFoundError:
    entries, state = [], "missing"
except (OSError, ValueError, KeyError, TypeError) as exc:
    entries, state = [], f"unreadable: {exc}"
print(json.dumps({"manifest": state, "entries": entries, "found": {e["path"]: found(e["path"]) for e in entries}}))
