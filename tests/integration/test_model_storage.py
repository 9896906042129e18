"""The model storage's speed measured for real on every lab host: fio (installed by the deploy's
model_storage component) on the filesystem of vllm_models_dir, through the verify check onboarding's
acceptance runs (verify/test_model_storage.py, `-m storage`), judged against the lab's
storage_thresholds. Bounded by the lab's group data: a 32 MiB file, 1 s a measurement (about 4 s a
host); the containers' pytest and the VM's run at once, as harness.Lab.verify runs them. The
thresholds' arithmetic, fio's output read and the test file's removal are the unit tests'
(tests/unit/test_onboarding_checks.py, with this machine's fio).
"""

from __future__ import annotations

import re

import pytest
from harness import BIN, run_at_once, state

pytestmark = pytest.mark.lab_stage("as made")


def test_fio_measures_the_model_storage_of_every_lab_host(lab, deployed):
    kinds = {name: h["kind"] for name, h in state()["hosts"].items()}
    parts: dict[str, list[str]] = {}
    for url in lab.testinfra_hosts().split(","):
        parts.setdefault(kinds[url.removeprefix("ssh://").split("?", 1)[0]], []).append(url)
    codes, output = run_at_once({kind: [str(BIN / "pytest"), "verify/test_model_storage.py", "-m", "storage",
                                        "-p", "no:cacheprovider", "-q", "-s", "-rf", f"--hosts={','.join(urls)}"]
                                 for kind, urls in sorted(parts.items())}, timeout=300)
    assert set(codes.values()) == {0}, output[-4000:]
    # each host's figures, as the check prints them: measured on its own filesystem, with O_DIRECT or saying not
    for name in kinds:
        m = re.search(rf"{name}: model storage: (/\S*) \((\S+) on (\S+), fio-[0-9.]+, (.+?)\): sequential read "
                      r"([0-9]+) MB/s, 4 KiB random read ([0-9.]+) ms mean", output)
        assert m, (name, output[-3000:])
        assert int(m.group(5)) >= 50 and float(m.group(6)) <= 20.0  # group_data/lab.py storage_thresholds
