"""thp: transparent huge pages are set as group data says, now and at every boot."""

from pyinfra.api import deploy
from pyinfra.operations import systemd

from llmfleet.settings import Settings
from operations import managed_files, sysfs

ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
UNIT = "llmfleet-thp.service"


@deploy("thp")
def configure(settings: Settings):
    """Set `thp_enabled` and `thp_defrag` in sysfs and install a boot unit that sets them again."""
    unit = managed_files.template(
        "boot unit sets transparent huge pages", "thp", UNIT + ".j2", f"/etc/systemd/system/{UNIT}",
        enabled=settings.thp_enabled,
        defrag=settings.thp_defrag,
        enabled_path=ENABLED,
        defrag_path=DEFRAG,
    )
    # enabled only: the values are set now by the sysfs operations below (and on a container host
    # the unit is skipped by its condition, so "running" would never hold)
    systemd.service(name="thp unit enabled at boot", service=UNIT, enabled=True, running=None,
                    daemon_reload=unit.will_change)
    sysfs.value(name="thp enabled now", path=ENABLED, wanted=settings.thp_enabled, label="thp_enabled")
    sysfs.value(name="thp defrag now", path=DEFRAG, wanted=settings.thp_defrag, label="thp_defrag")
