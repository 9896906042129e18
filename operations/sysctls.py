"""sysctls: kernel settings from group data, persisted in a sysctl.d drop-in and applied now."""

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import OperationValueError

from llmfleet.facts import SysfsValues
from llmfleet.settings import Settings
from operations import managed_files, sysfs

DROPIN = "/etc/sysctl.d/90-llmfleet.conf"


def proc_path(name: str) -> str:
    return "/proc/sys/" + name.replace(".", "/")


def as_text(value) -> str:
    return " ".join(str(value).split())


def check_names(settings: Settings) -> None:
    """Fail before any change when the host's kernel lacks a sysctl group data names."""
    facts = host.get_fact(SysfsValues, paths=[proc_path(k) for k in settings.sysctls])
    missing = [k for k in settings.sysctls if facts[proc_path(k)]["value"] is None]
    if missing:
        listed = ", ".join(f"sysctls.{k} = {settings.sysctls[k]!r}" for k in missing)
        raise OperationValueError(
            f"host {host.name}: {listed}: this host's kernel has no such sysctl ({proc_path(missing[0])} "
            "is missing); fix the name, or remove it from this host's group data")


@deploy("sysctls")
def configure(settings: Settings):
    """Persist `sysctls` in a drop-in and set each one now where the host lets it be set."""
    check_names(settings)
    managed_files.template("sysctl drop-in", "sysctls", "90-llmfleet.conf.j2", DROPIN,
                           sysctls={k: as_text(v) for k, v in sorted(settings.sysctls.items())})
    for name, value in sorted(settings.sysctls.items()):
        sysfs.value(name=f"sysctl {name} = {as_text(value)} now", path=proc_path(name), wanted=as_text(value),
                    label=f"sysctls.{name}")
