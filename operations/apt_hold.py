"""A shared operation: Debian packages are held (`apt-mark hold`), so upgrades leave them alone."""

from pyinfra import host
from pyinfra.api import StringCommand, operation

from llmfleet.facts import NvidiaHost


@operation()
def held(packages: list[str]):
    """
    Hold the packages (only those not yet held).

    + packages: package names
    """
    have = set(host.get_fact(NvidiaHost)["held"])
    missing = sorted(set(packages) - have)
    if not missing:
        host.noop(f"held already: {', '.join(sorted(packages))}")
        return
    yield StringCommand("apt-mark hold " + " ".join(missing))
