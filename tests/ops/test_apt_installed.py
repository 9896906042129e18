"""operations.apt_installed: the apt index is refreshed only when a package is missing (a refresh
is a change: with it on every call, a dry run named base_packages and chrony as changes on every
host whose index was older than apt_cache_valid_s, with nothing to install)."""

import pytest
from pyinfra.context import ctx_host

import operations

INSTALLED = {"numactl": ["2.0.16-1"], "pciutils": ["1:3.9.0-4"], "chrony": ["4.3-2+deb12u1"]}


class FactHost:
    name = "gpu-1"

    def get_fact(self, cls, **kwargs):
        assert cls.__name__ == "DebPackages", cls
        return INSTALLED


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(operations.apt, "packages", lambda **kw: seen.append(kw))
    return seen


@pytest.mark.parametrize("packages,refresh", [
    (["numactl", "pciutils"], False),  # every package installed: no refresh, however old the index
    (["numactl", "python3-venv"], True),  # one missing: refreshed first (when older than cache_time)
    (["chrony=4.3-2+deb12u1"], False),  # the version asked for is the one installed
    (["chrony=4.5-1"], True),  # another version is asked for
])
def test_the_index_is_refreshed_only_when_a_package_is_missing(calls, packages, refresh):
    with ctx_host.use(FactHost()):
        operations.apt_installed("base packages are installed", packages, 3600, no_recommends=True)
    assert calls == [{"name": "base packages are installed", "packages": packages, "update": refresh,
                      "cache_time": 3600, "no_recommends": True}]


def test_missing_packages_names_each_missing_spec():
    assert operations.missing_packages(INSTALLED, ["numactl", "fio", "chrony=4.5-1", "chrony"]) == ["fio",
                                                                                                  "chrony=4.5-1"]
