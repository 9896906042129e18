"""reboot: a host reboots only when it must, in batches of at most `reboot_max_unavailable`,
stopping its serving units cleanly first, and comes back healthy before the roll goes on.

Reasons to reboot: the running kernel command line differs from the deployed one (parameters
missing, or a parameter llmfleet used to set still present), or a package left
/run/reboot-required. The roll stops at the first host that does not come back (new boot id,
systemd running, the expected kernel command line): the hosts after it are not rebooted.
The batches hold whether or not hosts run in step (`llmfleet deploy`'s shards, pyinfra's
--no-wait): a host holds a slot of llmfleet/roll.py from its gate until it is back.
"""

from __future__ import annotations

import shlex
import time

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation

from llmfleet import roll
from llmfleet.facts import BootState, IsContainer
from llmfleet.settings import Settings
from operations import kernel_cmdline

ROLL = roll.REBOOT  # its slots and its stop (llmfleet/roll.py), shared by every host of a deploy
_BOOT_IDS: dict[str, str] = {}


def reasons(settings: Settings) -> list[str]:
    """Why this host needs a reboot now (empty: it does not)."""
    boot = host.get_fact(BootState)
    why = []
    if not host.get_fact(IsContainer):
        want = kernel_cmdline.tokens(settings.kernel_cmdline)
        missing = [t for t in want if t not in boot["cmdline"]]
        stale = [t for t in kernel_cmdline.deployed_tokens() if t not in want and t in boot["cmdline"]]
        if missing:
            why.append(f"the running kernel command line lacks {' '.join(missing)}")
        if stale:
            why.append(f"the running kernel command line still has {' '.join(stale)}")
    if boot["reboot_required"]:
        why.append("/run/reboot-required exists (a package asked for a reboot)")
    return why


# FunctionCommand passes (state, host) to functions whose first parameters have these names.
def _run(host, command: str) -> tuple[bool, str]:
    ok, output = host.run_shell_command(StringCommand(command), _sudo=True)
    return ok, output.stdout.strip()


def _roll() -> roll.Roll:
    return roll.get(ROLL, gevent.sleep)  # waiting for a slot lets the other hosts' greenlets run


def _gate(state, host, limit: int) -> bool:
    """Hold one of the roll's `limit` slots (reboot_max_unavailable) until the host is back."""
    why = _roll().enter(host.name, limit, gevent.getcurrent())
    if why:
        host.log_styled(f"not rebooted: the roll stopped after {why}", fg="red", log_func=logger.error)
        return False
    return True


def _record_boot_id(state, host) -> bool:
    ok, boot_id = _run(host, "cat /proc/sys/kernel/random/boot_id")
    _BOOT_IDS[host.name] = boot_id
    return ok


def _stop_roll(host, why: str) -> bool:
    _roll().stop(host.name, why)
    host.log_styled(f"reboot failed: {why}; stopping the roll", fg="red", log_func=logger.error)
    return False


def _new_boot(host) -> bool:
    """Whether the host answers over SSH with a boot id other than the one recorded before its
    reboot. Until then anything may happen: the old system, still shutting down, can accept a
    connection and cut it mid-command (paramiko raises), or refuse it; that is "not back yet",
    not a failed reboot."""
    try:
        host.connect(show_errors=False)
        if host.connected:
            ok, boot_id = _run(host, "cat /proc/sys/kernel/random/boot_id")
            if ok and boot_id and boot_id != _BOOT_IDS.get(host.name):
                return True
    except Exception as exc:  # noqa: BLE001 - see the docstring: the host is not back yet
        logger.debug(f"{host.name}: not back yet ({exc!r})")
    try:
        host.disconnect()
    except Exception:  # noqa: BLE001 - a connection the old system cut is gone either way
        host.connected = False
    return False


def _wait_back(state, host, expect_tokens: list[str], timeout_s: int) -> bool:
    """Wait for a new boot id over SSH, systemd up, and the expected kernel command line."""
    try:
        time.sleep(3)
        host.disconnect()
        deadline = time.monotonic() + timeout_s
        while not _new_boot(host):
            if time.monotonic() > deadline:
                return _stop_roll(host, f"did not come back within {timeout_s}s (reboot_timeout_s)")
            time.sleep(2)
        left = max(10, int(deadline - time.monotonic()))
        _, system = _run(host, f"timeout {left} systemctl is-system-running --wait || true")
        if system != "running":
            _, failed = _run(host, "systemctl --failed --no-legend --plain | cut -d' ' -f1 | xargs")
            return _stop_roll(host, f"came back {system or 'unknown'} (failed units: {failed or 'none'})")
        _, cmdline = _run(host, "cat /proc/cmdline")
        missing = [t for t in expect_tokens if t not in cmdline.split()]
        if missing:
            return _stop_roll(host, f"came back without {' '.join(missing)} on its kernel command line")
        host.log_styled("rebooted and healthy", fg="green", log_func=logger.info)
        _roll().leave(host.name)
        return True
    except Exception as exc:  # noqa: BLE001 - pyinfra would log and carry on; the roll must stop
        return _stop_roll(host, f"could not be checked after its reboot ({exc})")


@operation(is_idempotent=False)
def rebooted(reasons: list[str], expect_tokens: list[str], stop_units: list[str], timeout_s: int, limit: int = 1):
    """
    Reboot the host and confirm it came back healthy.

    + reasons: why the host reboots (shown in the output)
    + expect_tokens: kernel command line tokens the host must boot with
    + stop_units: systemd units stopped cleanly first, where active
    + timeout_s: how long the host may take to come back
    + limit: hosts of the deploy rebooting at once at most (reboot_max_unavailable)
    """
    yield FunctionCommand(_gate, (limit,), {})
    for unit in stop_units:
        quoted = shlex.quote(unit)
        yield StringCommand(f"if systemctl is-active --quiet {quoted}; then systemctl stop {quoted}; fi")
    yield FunctionCommand(_record_boot_id, (), {})
    yield StringCommand("( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &")
    yield FunctionCommand(_wait_back, (expect_tokens, timeout_s), {})


@deploy("reboot")
def reboot_if_needed(settings: Settings, also: list[str] | None = None):
    """Reboot the host if `reasons()` finds any (or `also` gives some: another component's, like
    a new NVIDIA driver), at most `reboot_max_unavailable` hosts at a time."""
    why = reasons(settings) + list(also or [])
    if not why:
        host.noop("reboot: not needed (running kernel command line and modules as deployed, no reboot requested)")
        return
    expect = [] if host.get_fact(IsContainer) else kernel_cmdline.tokens(settings.kernel_cmdline)
    rebooted(
        name="reboot: " + "; ".join(why),
        reasons=why,
        expect_tokens=expect,
        stop_units=list(settings.reboot_stop_units),
        timeout_s=settings.reboot_timeout_s,
        limit=settings.reboot_max_unavailable,
        _parallel=settings.reboot_max_unavailable,
    )
