"""module_blacklist: modules group data blacklists are never loaded, and are unloaded now."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import KernelModules, Which
from pyinfra.operations import server

from llmfleet.facts import IsContainer
from llmfleet.settings import Settings
from operations import managed_files

BLACKLIST = "/etc/modprobe.d/90-llmfleet-blacklist.conf"


@deploy("module_blacklist")
def configure(settings: Settings):
    """Blacklist `module_blacklist` (also for explicit loads) and unload those loaded."""
    blacklist = managed_files.template("modprobe blacklist", "module_blacklist", "90-llmfleet-blacklist.conf.j2",
                                       BLACKLIST, modules=sorted(settings.module_blacklist))
    if host.get_fact(IsContainer):
        host.noop("module_blacklist: unloading not applied: a container host shares the machine's kernel "
                  "and cannot load or unload modules (the blacklist file is written for completeness)")
        return
    if blacklist.will_change and host.get_fact(Which, command="update-initramfs"):
        # a blacklisted module must not come back from the initramfs at boot
        server.shell(name="initramfs regenerated with the blacklist", commands=["update-initramfs -u"])
    loaded = host.get_fact(KernelModules) or {}
    for module in sorted(settings.module_blacklist):
        if module.replace("-", "_") in loaded:
            server.shell(name=f"module {module} unloaded", commands=[f"modprobe -r {module}"])
