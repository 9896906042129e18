"""llmfleet/remote/vllm_env_record.py on its own, run as the deploy runs it, against an
environment folder whose site-packages holds distributions' metadata; and the repair commands
and restart causes the deploy derives from its report (facts in, commands and causes out)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from llmfleet.facts import VllmEnvironment, python_script

SITE = "lib/python3.12/site-packages"


def dist(env: Path, name: str, version: str) -> None:
    info = env / SITE / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def undist(env: Path, name: str) -> None:
    for info in (env / SITE).glob(f"{name.replace('-', '_')}-*.dist-info"):
        shutil.rmtree(info)


def record(env: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(["sh", "-c", python_script("vllm_env_record", str(env), *args)], capture_output=True,
                          text=True, timeout=60)
    return proc.returncode, VllmEnvironment().process(proc.stdout.splitlines())


@pytest.fixture
def env(tmp_path) -> Path:
    env = tmp_path / "envs" / "abc123"
    for name, version in (("vllm", "0.19.1"), ("torch", "2.9.0"), ("Typing_Extensions", "4.12.2"), ("pip", "24.0")):
        dist(env, name, version)
    return env


def test_the_record_holds_every_distribution_with_its_version_and_how_it_was_made(env):
    rc, out = record(env, "write", "made by llmfleet: pip install vllm==0.19.1")
    assert rc == 0 and out == {"exists": True, "recorded": True, "added": {}, "removed": {}, "changed": {}}
    saved = json.loads((env / ".llmfleet-packages.json").read_text())
    assert saved == {"packages": {"pip": "24.0", "torch": "2.9.0", "typing-extensions": "4.12.2", "vllm": "0.19.1"},
                     "note": "made by llmfleet: pip install vllm==0.19.1"}
    assert oct((env / ".llmfleet-packages.json").stat().st_mode & 0o777) == "0o644"


def test_an_upgrade_a_removal_and_an_addition_by_hand_are_each_named(env):
    record(env, "write", "made")
    undist(env, "torch")
    dist(env, "torch", "2.10.0")  # upgraded by hand
    undist(env, "Typing_Extensions")  # removed by hand
    dist(env, "requests", "2.32.3")  # added by hand
    rc, out = record(env, "diff")
    assert rc == 0 and out == {"exists": True, "recorded": True, "added": {"requests": "2.32.3"},
                               "removed": {"typing-extensions": "4.12.2"}, "changed": {"torch": ["2.9.0", "2.10.0"]}}
    rc, _ = record(env, "check")
    assert rc == 1  # a repair that left a difference fails its operation


def test_an_environment_as_recorded_passes_the_check(env):
    record(env, "write", "made")
    rc, out = record(env, "check")
    assert rc == 0 and not (out["added"] or out["removed"] or out["changed"])


def test_an_environment_made_before_records_says_it_has_none(env):
    rc, out = record(env, "diff")
    assert rc == 0 and (out["exists"], out["recorded"]) == (True, False)
    assert record(env, "check")[0] == 1


def test_a_missing_environment_is_not_an_error(tmp_path):
    rc, out = record(tmp_path / "nowhere", "diff")
    assert rc == 0 and (out["exists"], out["recorded"]) == (False, False)
