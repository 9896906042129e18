"""Run on a host by the verify suite: print the contents of the files named in argv as JSON."""
import json
import sys

out: dict = {}
for path in sys.argv[1:]:
    try:
        with open(path) as fh:
            out[path] = fh.read()
    except FileNotFoundError:
        out[path] = None
print(json.dumps(out))
