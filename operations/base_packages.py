"""base_packages: the Debian/Ubuntu packages every GPU server needs are installed."""

from pyinfra.api import deploy
from pyinfra.operations import apt

from llmfleet.settings import Settings


@deploy("base_packages")
def install(settings: Settings):
    """Install `base_packages`, refreshing the apt index only when older than `apt_cache_valid_s`."""
    apt.packages(
        name="base packages are installed",
        packages=list(settings.base_packages),
        update=True,
        cache_time=settings.apt_cache_valid_s,
        no_recommends=True,
    )
