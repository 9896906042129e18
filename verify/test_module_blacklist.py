"""module_blacklist: blacklisted modules are blacklisted (also against explicit loads) and not loaded."""

import pytest

from verify.helpers import CONTAINER_SKIP, expect, read_files

BLACKLIST = "/etc/modprobe.d/90-llmfleet-blacklist.conf"


def test_blacklist_file(host, host_name, settings):
    text = read_files(host, BLACKLIST)[BLACKLIST] or ""
    want = sorted(f"{kind} {m}" for m in settings.module_blacklist for kind in ("blacklist", "install"))
    got = sorted(" ".join(ln.split()[:2]) for ln in text.splitlines() if ln.split()[:1] in (["blacklist"], ["install"]))
    expect(host_name, f"module_blacklist ({BLACKLIST})", want, got)


def test_blacklisted_modules_not_loaded(host, host_name, settings, is_container):
    if is_container:
        pytest.skip(CONTAINER_SKIP.format(what="module loading"))
    loaded = {ln.split()[0] for ln in read_files(host, "/proc/modules")["/proc/modules"].splitlines()}
    expect(host_name, "module_blacklist loaded", [],
           [m for m in settings.module_blacklist if m.replace("-", "_") in loaded])
