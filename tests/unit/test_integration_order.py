"""The integration tests own their order: each module declares its stage in the lab's life, and the
order holds whatever order the files are named or given in."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collected(*paths: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line]


def test_the_lab_down_test_runs_last_and_the_fleet_tests_after_the_lab_as_made_even_given_first():
    files = collected("tests/integration/test_lab_down.py", "tests/integration/test_fleet.py",
                      "tests/integration/test_lab.py", "tests/integration/test_baseline.py")
    order = list(dict.fromkeys(files))
    assert order == ["tests/integration/test_lab.py", "tests/integration/test_baseline.py",
                     "tests/integration/test_fleet.py", "tests/integration/test_lab_down.py"], order


def test_every_integration_module_is_collected_in_stage_order():
    order = list(dict.fromkeys(collected("tests/integration")))
    assert order[-4:] == ["tests/integration/test_fleet.py", "tests/integration/test_layout.py",
                          "tests/integration/test_tune.py", "tests/integration/test_lab_down.py"], order
    assert len(order) == len(list((ROOT / "tests" / "integration").glob("test_*.py")))
