"""kernel_cmdline: the kernel command line carries the parameters group data lists, through a
grub drop-in (the distribution's /etc/default/grub stays untouched) and update-grub.

The new command line takes effect at the next boot; operations/reboot.py decides on reboots.
"""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import OperationValueError
from pyinfra.facts.files import FileContents
from pyinfra.facts.server import Which
from pyinfra.operations import server

from llmfleet.facts import IsContainer
from llmfleet.settings import Settings
from operations import managed_files

GRUB_DROPIN = "/etc/default/grub.d/90-llmfleet.cfg"
CONTAINER_REASON = ("not applied: a container host shares the kernel of the machine it runs on "
                    "and boots no kernel of its own")


def tokens(params: dict) -> list[str]:
    """Kernel command line tokens for the parameters, in a stable order."""
    return [name if value is None else f"{name}={value}" for name, value in sorted(params.items())]


def deployed_tokens() -> list[str]:
    """Tokens the drop-in carried before this deploy (to notice parameters that were removed)."""
    lines = host.get_fact(FileContents, path=GRUB_DROPIN) or []
    for line in lines:
        if line.startswith("GRUB_CMDLINE_LINUX="):
            return line.split("=", 1)[1].strip('"').replace("$GRUB_CMDLINE_LINUX", "").split()
    return []


@deploy("kernel_cmdline")
def configure(settings: Settings):
    """Write the grub drop-in with `kernel_cmdline` and regenerate grub's configuration if it changed."""
    if host.get_fact(IsContainer):
        host.noop(f"kernel_cmdline: {CONTAINER_REASON}")
        return
    if not host.get_fact(Which, command="update-grub"):
        raise OperationValueError(
            f"host {host.name}: kernel_cmdline = {settings.kernel_cmdline!r} needs update-grub, which "
            "this host lacks: install grub2-common (Debian/Ubuntu hosts booting through grub)")
    dropin = managed_files.template("grub drop-in carries the kernel parameters", "kernel_cmdline",
                                    "90-llmfleet.cfg.j2", GRUB_DROPIN, tokens=tokens(settings.kernel_cmdline))
    if dropin.will_change:
        server.shell(name="grub configuration regenerated", commands=["update-grub"])
