"""Run on a host by the verify suite: the loaded NVIDIA kernel module and the one installed for
the running kernel (what modprobe would load at the next boot), as one JSON object:
{"loaded": {"version", "flavour", "banner"} | None, "installed": {"version", "license"} | None}."""

import json

from _helpers import nvidia_module, sh  # llmfleet/remote/_helpers.py, sent along by python_script


def modinfo(field):
    # modinfo is in /sbin on Debian, in /usr/sbin (and a login's PATH) on Ubuntu
    for binary in ("modinfo", "/usr/sbin/modinfo", "/sbin/modinfo"):
        out = sh([binary, "-F", field, "nvidia"]).strip()
        if out:
            return out
    return None


version = modinfo("version")
print(json.dumps({"loaded": nvidia_module(),
                  "installed": {"version": version, "license": modinfo("license")} if version else None}))
