"""mirrors: apt and pip fetch packages from the places group data names (internal mirrors)."""

from pyinfra.api import deploy

from llmfleet.settings import Settings
from operations import managed_files

APT_PROXY_FILE = "/etc/apt/apt.conf.d/01llmfleet-proxy"
APT_ACQUIRE_FILE = "/etc/apt/apt.conf.d/80llmfleet-acquire"
PIP_CONF = "/etc/pip.conf"


@deploy("mirrors: apt proxy and pip index")
def configure(settings: Settings):
    """Point apt at `apt_proxy` (or remove the drop-in), bound apt's downloads (timeout, retries,
    pipelining), have apt-get wait for the dpkg lock, and write pip's site-wide config."""
    if settings.apt_proxy:
        managed_files.template("apt uses the configured proxy", "mirrors", "apt-proxy.conf.j2", APT_PROXY_FILE,
                               apt_proxy=settings.apt_proxy)
    else:
        managed_files.absent("no apt proxy drop-in", APT_PROXY_FILE)
    managed_files.template(
        "apt's downloads are bounded (timeout, retries, pipelining); it waits for the dpkg lock", "mirrors",
        "apt-acquire.conf.j2", APT_ACQUIRE_FILE,
        timeout_s=settings.apt_http_timeout_s,
        retries=settings.apt_retries,
        pipeline_depth=settings.apt_http_pipeline_depth,
        lock_timeout_s=settings.apt_lock_timeout_s,
    )
    managed_files.template("pip uses the configured index and wheel folders", "mirrors", "pip.conf.j2", PIP_CONF,
                           settings=settings)
