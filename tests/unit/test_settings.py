"""Group data validation: bad input is named with host, setting, value and fix."""

import runpy
from pathlib import Path

import pytest

from llmfleet.settings import Settings, SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]


def all_defaults() -> dict:
    data = runpy.run_path(str(ROOT / "group_data" / "all.py"))
    return {k: v for k, v in data.items() if not k.startswith("__")}


def test_defaults_in_group_data_all_are_valid_and_complete():
    settings = validate("h1", all_defaults())
    assert isinstance(settings, Settings)
    # every setting has its default (and its documentation) in group_data/all.py
    assert set(Settings.model_fields) <= set(all_defaults())


def test_connection_and_lab_data_are_not_settings():
    data = all_defaults() | {"ssh_user": "x", "_sudo": False, "lab_kind": "vm"}
    validate("h1", data)


def test_unknown_key_names_host_key_value_and_suggestion():
    data = all_defaults() | {"base_pakages": ["numactl"]}
    with pytest.raises(SettingsError) as exc:
        validate("gpu-7", data)
    msg = str(exc.value)
    assert "gpu-7" in msg and "'base_pakages'" in msg and "['numactl']" in msg
    assert "did you mean 'base_packages'" in msg


def test_missing_default_is_reported():
    data = all_defaults()
    del data["pip_no_index"]
    with pytest.raises(SettingsError, match="'pip_no_index' is missing"):
        validate("h1", data)


@pytest.mark.parametrize("key,value,fragment", [
    ("base_packages", ["numactl; rm -rf /"], "not a Debian package name"),
    ("base_packages", ["NumaCtl"], "not a Debian package name"),
    ("apt_proxy", "http://proxy:3142/$(reboot)", "URL"),
    ("pip_find_links", ["ftp://mirror/wheels"], "URL"),
    ("pip_trusted_hosts", ["a b"], "host name"),
    ("pip_no_index", "sometimes", "bool"),
    ("apt_cache_valid_s", "an hour", "integer"),
])
def test_invalid_values_are_named(key, value, fragment):
    with pytest.raises(SettingsError) as exc:
        validate("gpu-3", all_defaults() | {key: value})
    msg = str(exc.value)
    assert msg.startswith("host gpu-3:"), msg
    assert key in msg and repr(value) in msg and fragment in msg, msg
