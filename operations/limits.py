"""limits: the service account's open-file and locked-memory limits, for logins (limits.d) and
for every systemd service (system.conf.d DefaultLimit*, since services ignore limits.d)."""

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.operations import server

from llmfleet.facts import Account
from llmfleet.settings import Settings
from operations import managed_files

LIMITS_FILE = "/etc/security/limits.d/90-llmfleet.conf"
SYSTEMD_FILE = "/etc/systemd/system.conf.d/90-llmfleet-limits.conf"


def systemd_value(value) -> str:
    return "infinity" if value == "unlimited" else str(value)


@operation()
def service_account(user: str, home: str, shell: str):
    """
    A system account with this home (owned by it and its group) and shell: pyinfra's server.user
    when anything differs, after one cheap read (server.user reads the Users fact, several commands
    per account on the host, every run).

    + user: the account
    + home: its home directory, created when missing
    + shell: its login shell
    """
    have = host.get_fact(Account, user=user)
    if have == {"home": home, "shell": shell, "home_owner": f"{user}:{user}"}:
        host.noop(f"service account {user} exists (home {home}, shell {shell})")
        return
    yield from server.user._inner(user=user, system=True, shell=shell, home=home, create_home=True)


@deploy("limits")
def configure(settings: Settings):
    """Create the service account if missing and set `limits_nofile` and `limits_memlock` for it."""
    service_account(name="service account exists", user=settings.service_user,
                    home=f"/var/lib/{settings.service_user}", shell="/usr/sbin/nologin")
    managed_files.template("limits.d has the service account's limits", "limits", "90-llmfleet.conf.j2",
                           LIMITS_FILE, settings=settings)
    managed_files.directory("system.conf.d exists", "/etc/systemd/system.conf.d")
    manager = managed_files.template(
        "systemd services get the same limits", "limits", "90-llmfleet-limits.conf.j2", SYSTEMD_FILE,
        nofile=systemd_value(settings.limits_nofile),
        memlock=systemd_value(settings.limits_memlock),
    )
    if manager.will_change:
        # The manager reads system.conf.d only when it (re-)executes; running services keep
        # their limits until restarted.
        server.shell(name="systemd re-executes to read its new default limits", commands=["systemctl daemon-reexec"])
