"""gpu_clocks: every GPU runs the configured application clocks (memory, graphics)."""

from llmfleet.gpu import app_clocks
from verify.helpers import expect_each


def test_application_clocks(host_name, settings, gpu_profile, gpu_state):
    clocks = app_clocks(settings)
    setting = "gpu_app_clocks" if settings.gpu_app_clocks else f"gpu_profiles.{settings.gpu_profile}.app_clocks"
    expect_each(host_name, f"{setting} (memory, graphics MHz)", (clocks.memory, clocks.graphics),
                {g["index"]: (g["app_memory"], g["app_graphics"]) for g in gpu_state["nvml"]["gpus"]})
