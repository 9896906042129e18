"""The served API as a client sees it, from the host itself (run as root: it reads the API key
file). Arguments: port, served model name, key file or "-", and optionally a path prefix (the
front door's /instances/<name> route to one instance). Prints JSON; never the key."""

import json
import sys
import urllib.error
import urllib.request

from _helpers import api_key  # llmfleet/remote/_helpers.py, sent along by python_script

port, name, key_file = sys.argv[1], sys.argv[2], sys.argv[3]
prefix = sys.argv[4] if len(sys.argv) > 4 else ""
key = api_key(key_file)
base = f"http://127.0.0.1:{port}{prefix}"


def call(path, body=None, auth=True):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    if auth and key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()[:300]
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc}"


out: dict = {"key_set": key is not None}
out["health"] = call("/health")[0]
status, body = call("/v1/models")
out["models"] = [m["id"] for m in json.loads(body)["data"]] if status == 200 else f"HTTP {status}: {body}"
status, body = call("/metrics", auth=False)
out["metrics"] = sorted({line.split("{")[0].split(" ")[0] for line in body.splitlines()
                         if line and not line.startswith("#")}) if status == 200 else f"HTTP {status}"
status, body = call("/v1/completions", {"model": name, "prompt": "The fleet", "max_tokens": 4, "ignore_eos": True})
out["completion_tokens"] = json.loads(body)["usage"]["completion_tokens"] if status == 200 else f"HTTP {status}: {body}"
out["without_key"] = {"models": call("/v1/models", auth=False)[0],
                      "completion": call("/v1/completions", {"model": name, "prompt": "x", "max_tokens": 1},
                                         auth=False)[0]}
print(json.dumps(out))
