"""sysctls: persisted in the drop-in, and in force where the host's kernel is its own to set."""

import pytest

from verify.helpers import expect, read_files, run_remote

DROPIN = "/etc/sysctl.d/90-llmfleet.conf"


def proc_path(name: str) -> str:
    return "/proc/sys/" + name.replace(".", "/")


def test_sysctls_persisted(host, host_name, settings):
    text = read_files(host, DROPIN)[DROPIN] or ""
    got = {k.strip(): " ".join(v.split()) for k, v in (ln.split("=", 1) for ln in text.splitlines()
                                                      if "=" in ln and not ln.startswith("#"))}
    want = {k: " ".join(str(v).split()) for k, v in settings.sysctls.items()}
    expect(host_name, f"sysctls ({DROPIN})", want, {k: got.get(k) for k in want})


def test_sysctls_in_force(host, host_name, settings):
    paths = [proc_path(k) for k in settings.sysctls]
    state = run_remote(host, "proc_values", *paths)
    wanted, found, not_settable = {}, {}, []
    for name, value in settings.sysctls.items():
        current, writable = state[proc_path(name)]
        want = " ".join(str(value).split())
        have = None if current is None else " ".join(current.split())
        if writable:
            wanted[name], found[name] = want, have
        elif have != want:
            not_settable.append(f"{name} (is {have}, want {want})")
    expect(host_name, "sysctls in force (/proc/sys)", wanted, found)
    if not_settable:
        pytest.skip(f"container host: these sysctls belong to the machine's kernel and are read-only here: "
                    f"{', '.join(sorted(not_settable))}")
