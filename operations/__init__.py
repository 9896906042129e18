"""llmfleet's pyinfra operations: one module per component, named for the state it ensures.

Each component reads its settings (validated, see llmfleet/settings.py), renders its templates
from ``templates/<component>/`` and is verified by ``verify/test_<component>.py``.
"""

from pyinfra import host
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt


def missing_packages(installed: dict[str, list[str]], packages: list[str]) -> list[str]:
    """Which of `packages` (a name, or name=version as apt takes it) dpkg does not have installed
    (`installed`: pyinfra's DebPackages fact, name -> versions)."""
    missing = []
    for spec in packages:
        name, _, version = spec.partition("=")
        if name not in installed or (version and version not in installed[name]):
            missing.append(spec)
    return missing


def apt_installed(name: str, packages: list[str], cache_time: int, **kwargs):
    """pyinfra's apt.packages, refreshing the apt index (when older than `cache_time` s) only when
    one of `packages` is missing. An index refresh is a change: with it on every call, a deploy's
    dry run (and the audit's config drift) would name these operations as changes on every host
    whose index is older than `cache_time`, with nothing to install."""
    missing = missing_packages(host.get_fact(DebPackages), packages)
    return apt.packages(name=name, packages=packages, update=bool(missing), cache_time=cache_time, **kwargs)
