"""The lab's apt proxy configuration: a second host asking for an index shares its pending
download (see llmfleet/lab/services.py, ACNG_NEVER_DISPLACE_S, for the stall this prevents)."""

import time

from llmfleet.lab import services
from llmfleet.lab.config import APT_PROXY_PORT, LabPaths


def acng_conf(tmp_path) -> dict[str, str]:
    paths = LabPaths(state_dir=tmp_path / "lab", cache_dir=tmp_path / "cache")
    args, confdir = services._command("apt_proxy", "10.79.0.1", "10.79.0.0/24", paths)
    assert args[:3] == ["apt-cacher-ng", "-c", confdir]
    lines = (paths.services_dir / "apt_proxy" / "acng.conf").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if not line.startswith("#"))


def test_the_proxy_never_displaces_a_download_that_has_not_started(tmp_path):
    # apt-cacher-ng displaces an item when now > (its start time, 0 while pending) + this value
    conf = acng_conf(tmp_path)
    assert int(conf["ResponseFreezeDetectTime"]) > time.time() + 10 * 365 * 86400


def test_the_proxy_listens_on_the_bridge_only_with_a_cache_of_its_own(tmp_path):
    conf = acng_conf(tmp_path)
    assert (conf["BindAddress"], conf["Port"]) == ("10.79.0.1", str(APT_PROXY_PORT))
    assert conf["CacheDir"].startswith(str(tmp_path / "cache"))
