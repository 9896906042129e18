"""llmfleet/pyinfra_patches: the one list of what llmfleet changes in pyinfra, for one pyinfra version."""

import importlib
import re
import tomllib
from pathlib import Path

from llmfleet import pyinfra_patches
from llmfleet.pyinfra_patches import fact_memo, speed

ROOT = Path(__file__).resolve().parents[2]


def test_the_pinned_and_installed_pyinfra_are_the_version_the_patches_were_written_for():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if re.match(r"pyinfra\b", d))
    assert pin == f"pyinfra=={pyinfra_patches.PYINFRA_VERSION}", (
        f"pyproject.toml pins {pin!r}, the patches were written for pyinfra {pyinfra_patches.PYINFRA_VERSION}: check "
        "each patch of llmfleet/pyinfra_patches against the new version (its tests, benchmarks/fleet_scale.py), then "
        "update PYINFRA_VERSION")
    assert pyinfra_patches.installed_pyinfra() == pyinfra_patches.PYINFRA_VERSION


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_every_patch_names_what_it_replaces_and_its_off_switch():
    for patch in pyinfra_patches.PATCHES:
        assert patch.off.startswith("LLMFLEET_") and patch.why
        for target in patch.replaces:
            assert callable(_resolve(target)), target


def test_installed_the_patches_are_in_pyinfra_s_place_and_uninstalled_pyinfra_is_as_it_was(monkeypatch):
    for name in ("LLMFLEET_FACT_MEMO", "LLMFLEET_HINTS", "LLMFLEET_PYINFRA_SPEED"):
        monkeypatch.delenv(name, raising=False)
    originals = {t: _resolve(t) for p in pyinfra_patches.PATCHES for t in p.replaces}
    try:
        assert pyinfra_patches.install() == ["fact_memo", "fact_prefetch", "speed"]
        assert all(_resolve(t) is not f for t, f in originals.items())
    finally:
        pyinfra_patches.uninstall()
    assert all(_resolve(t) is f for t, f in originals.items())


def test_another_pyinfra_version_gets_no_patch_and_a_warning_that_says_the_fix(monkeypatch, caplog):
    monkeypatch.setattr(pyinfra_patches, "installed_pyinfra", lambda: "3.11.0")
    before = _resolve("pyinfra.api.facts._get_fact")
    assert pyinfra_patches.install() == []
    assert _resolve("pyinfra.api.facts._get_fact") is before and not fact_memo._INSTALLED and not speed._ORIGINAL
    assert "pyinfra 3.11.0 is installed" in caplog.text and "install pyinfra==3.10.0" in caplog.text


def test_each_off_switch_leaves_its_patch_out(monkeypatch):
    monkeypatch.setenv("LLMFLEET_FACT_MEMO", "off")
    monkeypatch.setenv("LLMFLEET_PYINFRA_SPEED", "off")
    try:
        assert pyinfra_patches.install() == []
        assert not fact_memo._INSTALLED and not speed._ORIGINAL
    finally:
        pyinfra_patches.uninstall()
