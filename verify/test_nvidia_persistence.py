"""nvidia_persistence: every GPU has persistence mode on."""

from verify.helpers import expect_each


def test_persistence_mode_on(host_name, gpu_profile, gpu_state):
    expect_each(host_name, "persistence mode (1 = on)", 1,
                {g["index"]: g["persistence"] for g in gpu_state["nvml"]["gpus"]})
