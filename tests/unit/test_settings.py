"""Group data validation: bad input is named with host, setting, value and fix."""

from pathlib import Path

import pytest

from llmfleet.schema import defaults as schema_defaults
from llmfleet.settings import Settings, SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]


MODEL = {"name": "m", "version": "1", "source": "https://models.internal/m-1.tar", "sha256": "a" * 64,
         "torch_dtype": "float16", "num_attention_heads": 32}


def all_defaults() -> dict:
    """The defaults of llmfleet/schema.py, with a model (the fleet must name the one it serves)."""
    data = schema_defaults()
    return {k: v for k, v in data.items() if not k.startswith("__")} | {"vllm_model": MODEL}


def test_every_setting_is_declared_once_with_its_default_and_documentation():
    settings = validate("h1", all_defaults())
    assert isinstance(settings, Settings)
    from llmfleet.settings_reference import field_docs

    undocumented = [name for name in Settings.model_fields if not field_docs().get(name, "").strip()]
    assert not undocumented, f"settings without a docstring in llmfleet/schema.py: {undocumented}"
    # group data sets only what differs: a host whose data is empty gets every default
    assert validate("h1", {"vllm_model": MODEL}) == settings


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


@pytest.mark.parametrize("old,value", [("vllm_frontdoor_metrics_port", 8405), ("vllm_frontdoor_check_interval_ms", 500),
                                       ("vllm_frontdoor_timeout_s", 1200)])
def test_the_front_doors_old_setting_names_are_refused_naming_the_new_one(old, value):
    new = old.removeprefix("vllm_")
    with pytest.raises(SettingsError) as exc:
        validate("gpu-3", all_defaults() | {old: value})
    assert str(exc.value).startswith("host gpu-3: "), exc.value
    assert (f"unknown setting {old!r} = {value!r}: renamed: did you mean {new!r}? The front door has a section of "
            f"its own: {new} = {value!r}") in str(exc.value), exc.value
    assert getattr(validate("gpu-3", all_defaults() | {new: value}), new) == value


@pytest.mark.parametrize("key,value,shown,fragment", [
    ("base_packages", ["numactl; rm -rf /"], "base_packages.0 = 'numactl; rm -rf /'", "not a Debian package name"),
    ("base_packages", ["NumaCtl"], "base_packages.0 = 'NumaCtl'", "not a Debian package name"),
    ("apt_proxy", "http://proxy:3142/$(reboot)", "apt_proxy = 'http://proxy:3142/$(reboot)'", "URL"),
    ("pip_find_links", ["ftp://mirror/wheels"], "pip_find_links.0 = 'ftp://mirror/wheels'", "URL"),
    ("pip_trusted_hosts", ["a b"], "pip_trusted_hosts.0 = 'a b'", "host name"),
    ("pip_no_index", "sometimes", "pip_no_index = 'sometimes'", "boolean"),
    ("apt_cache_valid_s", "an hour", "apt_cache_valid_s = 'an hour'", "integer"),
    # host baseline: kernel parameters end up in grub's shell-sourced configuration
    ("kernel_cmdline", {"transparent_hugepage": "never;reboot"},
     "kernel_cmdline.transparent_hugepage = 'never;reboot'", "kernel parameter value"),
    ("kernel_cmdline", {"quiet $(id)": None}, "kernel_cmdline.quiet $(id) = 'quiet $(id)'", "kernel parameter name"),
    ("limits_nofile", "lots", "limits_nofile = 'lots'", "integer"),
    ("limits_nofile", "65536", "limits_nofile = '65536'", "integer"),
    ("limits_nofile", 0, "limits_nofile = 0", "greater than 0"),
    ("limits_memlock", "infinite", "limits_memlock = 'infinite'", "unlimited"),
    ("chrony_servers", [], "chrony_servers = []", "at least 1 item"),
    ("sysctls", {"vm swappiness": 1}, "sysctls.vm swappiness = 'vm swappiness'", "sysctl name"),
    ("sysctls", {"vm.swappiness": "1; reboot"}, "sysctls.vm.swappiness = '1; reboot'", "sysctl value"),
    ("module_blacklist", ["ib uverbs"], "module_blacklist.0 = 'ib uverbs'", "kernel module name"),
    ("thp_enabled", "off", "thp_enabled = 'off'", "'never'"),
    ("reboot_max_unavailable", 0, "reboot_max_unavailable = 0", "greater than 0"),
    ("reboot_stop_units", ["vllm"], "reboot_stop_units.0 = 'vllm'", "systemd unit"),
    ("service_user", "Root User", "service_user = 'Root User'", "user name"),
    ("vllm_installer", "uv", "vllm_installer = 'uv'", "uv, pinned, like uv==0.13.9"),
    ("vllm_installer", "pip==24.0", "vllm_installer = 'pip==24.0'", "uv, pinned"),
])
def test_invalid_values_are_named(key, value, shown, fragment):
    with pytest.raises(SettingsError) as exc:
        validate("gpu-3", all_defaults() | {key: value})
    msg = str(exc.value)
    assert msg.startswith("host gpu-3:"), msg
    assert shown in msg and fragment in msg, msg


def test_the_settings_reference_is_rendered_from_the_schema():
    from llmfleet.settings_reference import markdown

    page = ROOT / "docs" / "settings.md"
    assert page.read_text() == markdown(), "docs/settings.md is stale: run `make settings-doc`"
    for name in Settings.model_fields:
        assert f"### `{name}`" in markdown()


def test_a_gpu_profile_based_on_another_takes_its_fields_and_changes_the_ones_given():
    profiles = schema_defaults()["gpu_profiles"]
    x1, x2 = profiles["h200_141gb_x1"], profiles["h200_141gb_x2"]
    assert x2["count"] == 2 and x1["count"] == 1
    assert x2["model_name"] == x1["model_name"] and x2["gpu_fabric"] is None and x1["gpu_fabric"] == "not_supported"
