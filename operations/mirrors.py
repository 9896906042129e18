"""mirrors: apt and pip fetch packages from the places group data names (internal mirrors)."""

from pyinfra.api import deploy
from pyinfra.operations import files

from llmfleet.settings import Settings
from operations import template

APT_PROXY_FILE = "/etc/apt/apt.conf.d/01llmfleet-proxy"
PIP_CONF = "/etc/pip.conf"


@deploy("mirrors: apt proxy and pip index")
def configure(settings: Settings):
    """Point apt at `apt_proxy` (or remove the drop-in) and write pip's site-wide config."""
    if settings.apt_proxy:
        files.template(
            name="apt uses the configured proxy",
            src=template("mirrors", "apt-proxy.conf.j2"),
            dest=APT_PROXY_FILE,
            mode="644",
            user="root",
            group="root",
            apt_proxy=settings.apt_proxy,
        )
    else:
        files.file(name="no apt proxy drop-in", path=APT_PROXY_FILE, present=False)
    files.template(
        name="pip uses the configured index and wheel folders",
        src=template("mirrors", "pip.conf.j2"),
        dest=PIP_CONF,
        mode="644",
        user="root",
        group="root",
        settings=settings,
    )
