"""mirrors: apt and pip fetch packages from the places group data names (internal mirrors)."""

from pyinfra.api import deploy
from pyinfra.operations import files

from llmfleet import templates
from llmfleet.settings import Settings

APT_PROXY_FILE = "/etc/apt/apt.conf.d/01llmfleet-proxy"
APT_ACQUIRE_FILE = "/etc/apt/apt.conf.d/80llmfleet-acquire"
PIP_CONF = "/etc/pip.conf"


@deploy("mirrors: apt proxy and pip index")
def configure(settings: Settings):
    """Point apt at `apt_proxy` (or remove the drop-in), bound apt's downloads (timeout, retries,
    pipelining), have apt-get wait for the dpkg lock, and write pip's site-wide config."""
    if settings.apt_proxy:
        files.template(
            name="apt uses the configured proxy",
            src=templates.path("mirrors", "apt-proxy.conf.j2"),
            dest=APT_PROXY_FILE,
            mode="644",
            user="root",
            group="root",
            apt_proxy=settings.apt_proxy,
        )
    else:
        files.file(name="no apt proxy drop-in", path=APT_PROXY_FILE, present=False)
    files.template(
        name="apt's downloads are bounded (timeout, retries, pipelining); it waits for the dpkg lock",
        src=templates.path("mirrors", "apt-acquire.conf.j2"),
        dest=APT_ACQUIRE_FILE,
        mode="644",
        user="root",
        group="root",
        timeout_s=settings.apt_http_timeout_s,
        retries=settings.apt_retries,
        pipeline_depth=settings.apt_http_pipeline_depth,
        lock_timeout_s=settings.apt_lock_timeout_s,
    )
    files.template(
        name="pip uses the configured index and wheel folders",
        src=templates.path("mirrors", "pip.conf.j2"),
        dest=PIP_CONF,
        mode="644",
        user="root",
        group="root",
        settings=settings,
    )
