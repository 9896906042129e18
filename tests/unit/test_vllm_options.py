"""Values of well-known vLLM options are checked against the range the compatibility table gives
them in the pinned version (llmfleet/compat.py OPTION_RULES), before any host is touched."""

import runpy
from pathlib import Path

import pytest
from test_gpu_guardrails import defaults

from llmfleet import compat
from llmfleet.schema import Settings
from llmfleet.settings import SettingsError, validate

ROOT = Path(__file__).resolve().parents[2]


def cpu_host(version: str, flags: dict) -> dict:
    """A host without a GPU profile: only the option checks apply, not the GPU guardrails."""
    return defaults(gpu_profile=None, vllm_version=version, flags={"tensor-parallel-size": 1} | flags)


def refused(version: str, flags: dict) -> str:
    with pytest.raises(SettingsError) as exc:
        validate("lab-c1", cpu_host(version, flags))
    return str(exc.value)


# (option, version, a value it takes, a value it refuses, the start of the refusal)
RULES = [
    ("gpu-memory-utilization", "0.19.1", 1, 1.2,
     "vllm_flags.gpu-memory-utilization = 1.2: vLLM 0.19.1 takes a number > 0 and <= 1 ("),
    ("gpu-memory-utilization", "0.19.1", 0.5, 0, "vllm_flags.gpu-memory-utilization = 0: vLLM 0.19.1 takes"),
    ("gpu-memory-utilization", "0.32.0", 0.9, "90%", "vllm_flags.gpu-memory-utilization = '90%': vLLM 0.32.0"),
    ("max-model-len", "0.19.1", "32k", 0,
     "vllm_flags.max-model-len = 0: vLLM 0.19.1 takes a whole number >= 1, or -1, 'auto', a size like '32k'"),
    ("max-model-len", "0.19.1", "auto", "lots", "vllm_flags.max-model-len = 'lots'"),
    ("max-model-len", "0.19.1", -1, 4096.5, "vllm_flags.max-model-len = 4096.5"),
    ("max-num-seqs", "0.19.1", 1, 0, "vllm_flags.max-num-seqs = 0: vLLM 0.19.1 takes a whole number >= 1"),
    ("max-num-batched-tokens", "0.33.0", 8192, -8192,
     "vllm_flags.max-num-batched-tokens = -8192: vLLM 0.33.0 takes a whole number >= 1"),
    ("tensor-parallel-size", "0.19.1", 1, 0, "vllm_flags.tensor-parallel-size = 0: vLLM 0.19.1 takes a whole "
                                             "number >= 1"),
    ("tensor-parallel-size", "0.19.1", 1, "two", "vllm_flags.tensor-parallel-size = 'two'"),
    ("pipeline-parallel-size", "0.32.0", 2, 0, "vllm_flags.pipeline-parallel-size = 0: vLLM 0.32.0 takes"),
    ("swap-space", "0.17.1", 0, -4, "vllm_flags.swap-space = -4: vLLM 0.17.1 takes a number >= 0"),
    ("cpu-offload-gb", "0.19.1", 2.5, -1, "vllm_flags.cpu-offload-gb = -1: vLLM 0.19.1 takes a number >= 0"),
    ("dtype", "0.19.1", "float16", "fp16",
     "vllm_flags.dtype = 'fp16': vLLM 0.19.1 takes one of 'auto', 'half', 'float16', 'bfloat16', 'float', "
     "'float32'"),
    ("kv-cache-dtype", "0.10.2", "fp8_e5m2", "bfloat16", "vllm_flags.kv-cache-dtype = 'bfloat16': vLLM 0.10.2 "
                                                          "takes one of 'auto', 'fp8',"),
    ("kv-cache-dtype", "0.19.1", "bfloat16", "nvfp4", "vllm_flags.kv-cache-dtype = 'nvfp4': vLLM 0.19.1 takes"),
    ("kv-cache-dtype", "0.32.0", "nvfp4", "octave_k3v4", "vllm_flags.kv-cache-dtype = 'octave_k3v4': vLLM 0.32.0"),
    ("kv-cache-dtype", "0.33.0", "octave_k3v4", "fp4", "vllm_flags.kv-cache-dtype = 'fp4': vLLM 0.33.0 takes"),
    ("block-size", "0.10.2", 128, 48, "vllm_flags.block-size = 48: vLLM 0.10.2 takes one of 1, 8, 16, 32, 64, 128"),
    ("block-size", "0.19.1", 48, 0, "vllm_flags.block-size = 0: vLLM 0.19.1 takes a whole number >= 1"),
]


@pytest.mark.parametrize("option,version,good,bad,expected", RULES)
def test_an_option_value_in_range_is_accepted_and_one_out_of_range_refused(option, version, good, bad, expected):
    validate("lab-c1", cpu_host(version, {option: good}))
    msg = refused(version, {option: bad})
    assert msg.startswith("host lab-c1: ") and expected in msg
    assert "(fix: e.g. " in msg


def _outside(rule: compat.OptionRule):
    """A value just outside the rule."""
    if rule.kind == "choice":
        return max(rule.choices) + 1 if isinstance(rule.choices[0], int) else "not_a_" + rule.option
    if rule.high is not None:
        return rule.high + 0.5
    return rule.low if rule.low_open else rule.low - 1


def _host_of(rule: compat.OptionRule, value) -> dict:
    """A CPU host of the row's first version with only the option set (group data's other flags,
    such as scheduling-policy, need later versions)."""
    data = cpu_host(rule.first, {})
    return data | {"vllm_flags": {rule.option: value}}


@pytest.mark.parametrize("rule", compat.OPTION_RULES, ids=lambda r: f"{r.option}-from-{r.first}")
def test_each_rule_accepts_its_example_and_refuses_a_value_outside_it(rule):
    validate("lab-c1", _host_of(rule, rule.example))
    with pytest.raises(SettingsError) as exc:
        validate("lab-c1", _host_of(rule, _outside(rule)))
    assert f"vllm_flags.{rule.option} = {_outside(rule)!r}: vLLM {rule.first} takes " in str(exc.value)
    assert rule.source in str(exc.value)


def test_rows_of_one_option_do_not_overlap():
    for option in {rule.option for rule in compat.OPTION_RULES}:
        rows = sorted((r for r in compat.OPTION_RULES if r.option == option), key=lambda r: compat.release_of(r.first))
        for a, b in zip(rows, rows[1:], strict=False):
            assert a.before is not None and compat.release_of(a.before) <= compat.release_of(b.first), (a, b)


def test_auto_is_taken_in_any_case_where_vllm_takes_it():
    validate("lab-c1", cpu_host("0.19.1", {"max-model-len": "AUTO"}))
    assert "vllm_flags.max-model-len = 'auto': vLLM 0.10.2 takes a whole number >= 1, or a size like '32k'" in \
        refused("0.10.2", {"max-model-len": "auto"})


def test_a_true_flag_is_not_a_value():
    assert "vllm_flags.max-num-seqs = True: vLLM 0.19.1 takes a whole number" in refused("0.19.1",
                                                                                        {"max-num-seqs": True})


def test_none_leaves_an_option_out_and_is_not_checked():
    validate("lab-c1", cpu_host("0.19.1", {"max-num-seqs": None}))


def test_a_name_list_is_not_applied_to_versions_newer_than_the_table():
    # kv-cache-dtype names of a release after 0.33.0 are not known: its parser decides on the host
    validate("lab-c1", cpu_host("0.34.0", {"kv-cache-dtype": "some_new_dtype"}))


def test_option_ranges_apply_on_gpu_hosts_too():
    with pytest.raises(SettingsError) as exc:
        validate("gpu-7", defaults(flags={"gpu-memory-utilization": 1.5}))
    assert "vllm_flags.gpu-memory-utilization = 1.5: vLLM 0.19.1 takes a number > 0 and <= 1" in str(exc.value)


def _group_data(name: str) -> dict:
    data = runpy.run_path(str(ROOT / "group_data" / name))
    return {k: v for k, v in data.items() if k in Settings.model_fields}


def test_the_lab_group_data_passes_the_option_checks():
    # the API key file exists once `llmfleet lab up` made it; its checks are test_vllm.py's
    validate("lab-c1", _group_data("all.py") | _group_data("lab.py") | {"vllm_api_key_file": None})


def test_the_device_inventory_data_passes_the_option_checks():
    host_data = runpy.run_path(str(ROOT / "inventories" / "device.py"))["device"][0][1]
    validate("@local", _group_data("all.py") | {k: v for k, v in host_data.items() if not k.startswith("_")})


def test_the_fleet_defaults_pass_the_option_checks():
    flags = Settings.model_fields["vllm_flags"].default
    assert {"gpu-memory-utilization", "max-model-len", "max-num-seqs", "tensor-parallel-size"} <= set(flags)
    validate("gpu-7", defaults())


def test_a_tensor_parallel_size_that_is_not_a_count_is_refused_once_on_a_gpu_host():
    with pytest.raises(SettingsError) as exc:
        validate("gpu-7", defaults(flags={"tensor-parallel-size": 0}))
    assert str(exc.value).count("vllm_flags.tensor-parallel-size = 0:") == 1
