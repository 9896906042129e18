"""Versions are compared as PEP 440 says (packaging.version), in the compatibility table's ranges:
pre-, dev- and post-releases and local labels belong to the release they name."""

import pytest
from packaging.version import Version

from llmfleet import compat


@pytest.mark.parametrize("version,release", [
    ("0.10.1rc1", "0.10.1"), ("0.10.2.dev5", "0.10.2"), ("0.19.1+cpu", "0.19.1"), ("2.10.0+cu128", "2.10.0"),
    ("0.10.1.1", "0.10.1.1"), ("0.33.0.post1", "0.33.0"), ("12.9", "12.9"),
])
def test_a_version_names_its_release(version, release):
    assert compat.release_of(version) == Version(release)


def test_a_release_candidate_is_not_read_as_a_later_patch_release():
    # the hand-written parser read 0.10.1rc1 as (0, 10, 11)
    assert compat.release_of("0.10.1rc1") < Version("0.10.2")
    assert compat.vllm_release("0.10.1rc1").volta_engine == "V0"


def test_two_digit_parts_sort_as_numbers():
    assert compat.release_of("0.10.10") > compat.release_of("0.10.9")


@pytest.mark.parametrize("version,engine", [("0.10.1.1", "V0"), ("0.10.2rc1", "V1"), ("0.19.1+cpu", "V1"),
                                            ("0.33.0.post1", "V1")])
def test_a_release_between_two_rows_belongs_to_the_earlier_row(version, engine):
    assert compat.vllm_release(version).volta_engine == engine


@pytest.mark.parametrize("version", ["0.4.2", "0.33.1", "1.0.0"])
def test_versions_outside_the_table_have_no_row(version):
    assert compat.vllm_release(version) is None


@pytest.mark.parametrize("version,sm70", [("2.10.0+cu128", True), ("2.10.7", True), ("2.11.0rc1", False),
                                          ("2.11.0+cu130", False), ("3.0.0", False)])
def test_torch_rows_are_open_ended_without_made_up_upper_bounds(version, sm70):
    assert compat.torch_release(version).has_sm70 is sm70


def test_metric_names_follow_release_candidates_of_the_version_that_renamed_them():
    assert compat.metric("kv_cache", "0.10.2") == "vllm:gpu_cache_usage_perc"
    assert compat.metric("kv_cache", "0.11.0rc2") == "vllm:kv_cache_usage_perc"
