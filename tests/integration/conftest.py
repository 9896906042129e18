"""One lab per test run, shared by every integration test; its life belongs to the `lab` fixture.

The test lab has its own directory, subnet and name prefix, so it runs beside a developer's demo
lab without touching it. It needs root (namespaces, mounts, containers), as CI has.

The lab's life has an order, declared by each module (or test) rather than implied by file names:
what is marked `pytest.mark.lab_stage("grown")` changes the lab's hosts (the fleet tests onboard
lab-c4; a crashed container comes back bare) and runs after everything that expects the lab as
`lab up` and the first deploy made it; `lab_stage("removed")` (the test of `lab down`) runs last.
Within a stage, pytest's own order holds.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from harness import (
    LAB_GROUPS,
    LAB_STAGES,
    LOGS,
    N_CONTAINERS,
    N_GATEWAYS,
    PREFIX,
    Deployed,
    Lab,
    boot_ids,
    deploy_at_once,
    llmfleet,
)


def pytest_collection_modifyitems(items):
    def stage(item) -> int:
        marker = item.get_closest_marker("lab_stage")
        if marker is None:
            return 0
        if marker.args[0] not in LAB_STAGES:
            raise pytest.UsageError(f"{item.nodeid}: lab_stage {marker.args[0]!r} is not one of {LAB_STAGES}")
        return LAB_STAGES.index(marker.args[0])

    items.sort(key=stage)  # stable: pytest's order within a stage


# The first deploy runs as one pyinfra run per lab group at once (harness.deploy_at_once). The
# whole lab in one run is dry-run by test_lab.py's second deploy (and deployed by `make demo`).
def _logged_deploy(attempt: int) -> tuple[int | None, str]:
    """The first deploy, each group's output written to reports/test-logs/ as it runs (kept if it
    hangs). The exit code is the first part's that failed (None: a part ran past the bound)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    return deploy_at_once(LAB_GROUPS, logs={g: LOGS / f"first-deploy-{attempt}-{g}.log" for g in LAB_GROUPS},
                          check=False)


@pytest.fixture(scope="session")
def deployed(lab) -> Deployed:
    """The first deploy of the whole baseline onto the fresh lab (shared by the tests; in two parts
    at once, by lab group).

    Twice in about ten full runs this deploy stalled with the machine idle (output cut during
    "Preparing operation files", cause not found). The lab's group data now bounds every command
    (`_timeout`), so a stall fails the stalled host with its command named, in the log kept in
    reports/test-logs/; the deploy is then run once more, as an operator would (it is
    idempotent), and a warning with the log's path says so. Any other failure fails the tests."""
    before = boot_ids()
    rc, output = _logged_deploy(1)
    if rc != 0 and (rc is None or "timeout" in output.lower() or "timed out" in output.lower()):
        import warnings

        warnings.warn(f"the first deploy stalled (exit {rc}; {LOGS / 'first-deploy-1-*.log'}): deploying again",
                      stacklevel=1)
        rc, again = _logged_deploy(2)
        output += again
    if rc != 0:
        raise AssertionError(f"the first deploy exited {rc}:\n{output[-5000:]}")
    return Deployed(output=output, boots_before=before, boots_after=boot_ids())


@pytest.fixture(scope="session")
def lab() -> Lab:
    if os.geteuid() != 0:
        pytest.exit("the integration tests need root (the lab creates namespaces, mounts and containers)",
                    returncode=2)
    llmfleet("lab", "down")
    # What a killed lab leaves behind without a state file: a namespace and a link with its names.
    subprocess.run(["ip", "netns", "add", f"{PREFIX}-lab-c9"], check=True)
    subprocess.run(["ip", "link", "add", f"{PREFIX}-c9", "type", "bridge"], check=True)
    up = llmfleet("lab", "up", "--hosts", str(N_CONTAINERS), "--vm", "--gateways", str(N_GATEWAYS))
    yield Lab(up_output=up.stdout + up.stderr)
    llmfleet("lab", "down", check=False)
