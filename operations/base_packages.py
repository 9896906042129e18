"""base_packages: the Debian/Ubuntu packages every GPU server needs are installed."""

from pyinfra.api import deploy

from llmfleet.settings import Settings
from operations import apt_installed


@deploy("base_packages")
def install(settings: Settings):
    """Install `base_packages`; the apt index is refreshed first (when older than `apt_cache_valid_s`)
    only when one is missing."""
    apt_installed("base packages are installed", list(settings.base_packages), settings.apt_cache_valid_s,
                  no_recommends=True)
