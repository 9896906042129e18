"""Run on a host by the verify suite with the vLLM environment's own python: the distributions it
imports from (importlib.metadata over its sys.path inside the environment), and the record the
deploy wrote when it made the environment (argv[1]), with the record's owner and mode.
Prints {"actual": {name: version}, "record": {name: version} | None, "owner": uid, "mode": "0644"}."""
import json
import os
import sys

from _helpers import distributions  # llmfleet/remote/_helpers.py, sent along by python_script

paths = [p for p in sys.path if p and os.path.realpath(p).startswith(os.path.realpath(sys.prefix) + os.sep)]
actual = distributions(paths)
record, owner, mode = None, None, None
try:
    with open(sys.argv[1]) as fh:
        record = json.load(fh).get("packages")
    st = os.stat(sys.argv[1])
    owner, mode = st.st_uid, oct(st.st_mode & 0o777)
except (OSError, ValueError):
    pass
print(json.dumps({"actual": actual, "record": record, "owner": owner, "mode": mode}))
