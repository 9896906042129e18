"""Run on a host (python3, standard library, as root): the record of what a vLLM environment
holds, `<env>/.llmfleet-packages.json` (root-owned, 0644, written when the environment is made),
against what it holds now. The distributions are read from the environment's own site-packages
with importlib.metadata (the host's python3 made the environment, so it reads the same metadata).

Arguments: the environment folder, then one of
  diff            print {"exists", "recorded", "added": {name: version}, "removed": {name: version},
                  "changed": {name: [recorded, actual]}}
  write NOTE      record what it holds now (with NOTE: how the environment came to be), print the diff
  check           print the diff; exit 1 when it differs from the record (after a repair)
Names are normalised as pip does (PEP 503: lower case, runs of -_. as one -).
"""

import glob
import json
import os
import sys

from _helpers import distributions  # llmfleet/remote/_helpers.py, sent along by python_script

RECORD = ".llmfleet-packages.json"
env, mode = sys.argv[1], sys.argv[2]
record_path = os.path.join(env, RECORD)


def installed():
    return distributions(sorted(glob.glob(os.path.join(env, "lib", "python3*", "site-packages"))))


def diff():
    if not os.path.isdir(env):
        return {"exists": False, "recorded": False, "added": {}, "removed": {}, "changed": {}}
    now = installed()
    try:
        with open(record_path) as f:
            recorded = json.load(f)["packages"]
    except (OSError, ValueError, KeyError):
        return {"exists": True, "recorded": False, "added": {}, "removed": {}, "changed": {}}
    return {"exists": True, "recorded": True,
            "added": {n: v for n, v in sorted(now.items()) if n not in recorded},
            "removed": {n: v for n, v in sorted(recorded.items()) if n not in now},
            "changed": {n: [v, now[n]] for n, v in sorted(recorded.items()) if n in now and now[n] != v}}


if mode == "write":
    tmp = record_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"packages": installed(), "note": sys.argv[3]}, f, indent=1, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, record_path)
result = diff()
print(json.dumps(result))
if mode == "check" and (not result["recorded"] or result["added"] or result["removed"] or result["changed"]):
    sys.exit(1)
