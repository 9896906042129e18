"""gpu_clocks: every GPU runs the configured application clocks (memory, graphics)."""

from llmfleet.gpu_guardrails import app_clocks
from verify.helpers import expect_each


def test_application_clocks(host_name, settings, gpu_profile, gpu_state):
    """The configured pair on every GPU; on a GPU whose profile has none (GeForce), NVML reports none."""
    clocks = app_clocks(settings)
    if clocks is None:
        expect_each(host_name, f"application clocks (gpu_profiles.{settings.gpu_profile}.app_clocks = None)",
                    "not supported", {g["index"]: "not supported" if isinstance(g["app_memory"], dict)
                                      else (g["app_memory"], g["app_graphics"]) for g in gpu_state["nvml"]["gpus"]})
        return
    setting = "gpu_app_clocks" if settings.gpu_app_clocks else f"gpu_profiles.{settings.gpu_profile}.app_clocks"
    expect_each(host_name, f"{setting} (memory, graphics MHz)", (clocks.memory, clocks.graphics),
                {g["index"]: (g["app_memory"], g["app_graphics"]) for g in gpu_state["nvml"]["gpus"]})
