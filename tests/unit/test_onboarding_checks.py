"""Onboarding acceptance's checks, on the CPU: the model storage's fio measurement (the host script
run here with the distribution's fio, and its figures judged against thresholds), DCGM's diagnostic
JSON read per GPU (a skipped or missing test is a failure), the burn-in's and the CUDA smoke test's
verdicts on their scripts' output, vLLM's weights load lines, and a later run compared with the kept
acceptance result."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from test_gpu_guardrails import defaults

from llmfleet import dcgm_exporter, gpu_burnin, gpu_health, model_storage, onboard_acceptance, vllm_logs
from llmfleet.remote import python_script
from llmfleet.schema import StorageThresholds
from llmfleet.settings import validate

DATA = Path(__file__).parent / "data"
LAB = StorageThresholds(min_read_mbs=50.0, max_read_latency_ms=20.0)
FLEET = StorageThresholds(min_read_mbs=3000.0, max_read_latency_ms=5.0)


def load(*parts: str) -> dict:
    return json.loads(DATA.joinpath(*parts).read_text())


# --- model storage ---------------------------------------------------------------------------------

def test_the_storage_script_measures_with_fio_here_and_leaves_nothing_behind(tmp_path):
    """The host script as a host runs it (python_script), with this machine's fio (Makefile SYSDEPS):
    vllm_models_dir does not exist yet, so its nearest existing parent is measured."""
    proc = subprocess.run(["sh", "-c", python_script("model_storage", str(tmp_path / "data" / "models"), "8", "1")],
                          capture_output=True, text=True, timeout=120)
    result = json.loads(proc.stdout)
    assert result["path"] == str(tmp_path) and "error" not in result, result
    f = model_storage.figures(result)
    assert f.read_mbs > 0 and f.read_latency_ms > 0 and f.read_iops > 0 and f.fio.startswith("fio-")
    assert list(tmp_path.iterdir()) == []  # the test file is gone


def test_recorded_figures_pass_the_labs_floor_and_fail_the_fleets_with_setting_expected_and_actual():
    f = model_storage.figures(load("storage", "ext4-this-machine.json"))
    assert (f.read_mbs, f.read_latency_ms, f.direct, f.fstype) == (734.4, 0.0658, True, "ext4")
    assert model_storage.problems(f, LAB) == []
    [slow] = model_storage.problems(f, FLEET)
    assert slow == ("sequential read of /tmp/h18-fio (ext4), storage_thresholds.min_read_mbs: expected at least "
                    "3000 MB/s, actual 734.4 MB/s (weights load this slowly)")


def test_a_slow_random_read_fails_the_latency_threshold():
    result = load("storage", "ext4-this-machine.json")
    result["rand_read"]["clat_ns"]["mean"] = 7_250_000  # network storage under load
    [late] = model_storage.problems(model_storage.figures(result), FLEET.model_copy(update={"min_read_mbs": 100.0}))
    assert "max_read_latency_ms: expected at most 5 ms, actual 7.25 ms (a cold start may time out)" in late


@pytest.mark.parametrize("result, said", [
    ({"path": "/data", "error": "fio is not installed (the distribution's package fio)", "missing": "fio"},
     "/data: fio is not installed (the distribution's package fio) (fix: deploy the host, or apt-get install fio)"),
    ({"path": "/data", "error": "12 MiB free on /: the 1024 MiB test file does not fit"}, "12 MiB free on /"),
])
def test_a_measurement_that_did_not_run_says_why(result, said):
    with pytest.raises(model_storage.StorageError) as exc:
        model_storage.figures(result)
    assert said in str(exc.value)


def test_storage_thresholds_are_group_data_and_checked():
    assert validate("h", defaults()).storage_thresholds == FLEET
    with pytest.raises(ValueError) as exc:
        validate("gpu-1", defaults(storage_thresholds={"min_read_mbs": 0, "max_read_latency_ms": 5.0}))
    assert "host gpu-1" in str(exc.value) and "storage_thresholds" in str(exc.value)


# --- DCGM diagnostics ------------------------------------------------------------------------------

def test_a_quick_diagnostic_that_passes_on_every_gpu():
    diag = dcgm_exporter.parse(load("dcgm", "r1-pass-8gpu.json"))
    assert dcgm_exporter.problems(diag, 1, list(range(8))) == []
    assert diag.per_gpu()[7] == {"software": "Pass"} and diag.serials[0] == "1654023000000"
    assert diag.version == "4.6.0" and diag.driver == "580.159.04"


def test_skipped_tests_fail_per_gpu_not_pass(tmp_path):
    """NVIDIA/DCGM#55: tests above level 1 skip on a SKU DCGM does not list; the run "passes" unless a
    skip counts as what it is."""
    diag = dcgm_exporter.parse(load("dcgm", "r3-skipped-dcgm55.json"))
    found = dcgm_exporter.problems(diag, 3, list(range(8)))
    assert len(found) == 3 * 8
    assert found[0] == ("GPU 0 (serial 1654023000000): dcgmi diag -r 3 diagnostic: expected Pass, actual Skip "
                        "(Skipping test: this SKU is not in the list of allowed SKUs for this test (diag-skus.yaml))")
    assert {p.split(": ")[1] for p in found} == {"dcgmi diag -r 3 diagnostic", "dcgmi diag -r 3 targeted_stress",
                                                 "dcgmi diag -r 3 targeted_power"}


def test_a_failed_gpu_a_gpu_left_out_and_a_test_that_never_ran_are_each_named():
    diag = dcgm_exporter.parse(load("dcgm", "r3-memory-fail-and-not-run.json"))
    found = dcgm_exporter.problems(diag, 3, list(range(8)))
    assert found == [
        "GPU 5: dcgmi diag -r 3 pcie: expected Pass, actual not run on this GPU",
        "GPU 3 (serial 1654023000003): dcgmi diag -r 3 memory: expected Pass, actual Fail (A memory mismatch was "
        "detected on GPU 3, but no error was reported by CUDA or NVML.)",
        "dcgmi diag -r 3 memory_bandwidth: expected Pass, actual not run (no result for any GPU)",
    ]
    assert diag.per_gpu()[5]["pcie"] == "not run"


def test_a_gpu_the_profile_has_but_dcgm_did_not_test_fails():
    diag = dcgm_exporter.parse(load("dcgm", "r1-pass-8gpu.json"))
    assert dcgm_exporter.problems(diag, 1, list(range(9)))[-1] == (
        "GPU 8: dcgmi diag -r 1 software: expected Pass, actual not run on this GPU")


def test_a_diagnostic_that_could_not_run_and_output_that_is_not_dcgms():
    diag = dcgm_exporter.parse(load("dcgm", "runtime-error.json"))
    assert dcgm_exporter.problems(diag, 1, [0]) == [
        "dcgmi diag -r 1: expected to run, actual: Error: Unable to complete diagnostic for group 2147483647. "
        "Return: (-16) Host engine is not loaded."]
    with pytest.raises(dcgm_exporter.DiagError):
        dcgm_exporter.parse({"version": "4.6.0"})
    empty = dcgm_exporter.parse({"DCGM Diagnostic": {"test_categories": []}})
    assert dcgm_exporter.problems(empty, 3, [0]) == ["dcgmi diag -r 3: expected tests, actual: none ran"]


# --- burn-in and CUDA smoke test -------------------------------------------------------------------

H200 = validate("h", defaults(gpu_profile="h200_141gb_x1", nvidia_driver_flavour="open",
                              nvidia_driver_version="580.159.04", cuda_toolkit_version="13.0",
                              vllm_flags={"tensor-parallel-size": 1})).gpu_profiles["h200_141gb_x1"]


def limits(fraction: float = 0.6, max_c: int = 85) -> gpu_burnin.Limits:
    return gpu_burnin.Limits.of(H200, fraction, max_c)


def test_the_burnin_floor_is_the_datasheet_figure_times_the_fraction():
    assert limits().min_tflops == 593.6  # 0.6 x 989.4
    no_figure = H200.model_copy(update={"fp16_tensor_tflops": None})
    assert gpu_burnin.Limits.of(no_figure, 0.6, 85).min_tflops is None


def test_a_healthy_burnin_passes_and_its_summary_has_the_runs_figures():
    result = load("burnin", "h200x2-healthy.json")
    assert gpu_burnin.problems(result, limits(), 2) == []
    s = gpu_burnin.summary(result)[1]
    assert (s["tflops"], s["max_temp_c"], s["max_mem_temp_c"], s["sm_mhz"]) == (702.6, 71, 78, [1980, 1980])
    assert s["reasons"] == {"SW power cap": 3} and s["failing_reasons"] == []  # full load: recorded, not failed
    text = gpu_burnin.describe(result, limits())
    assert "GPU 0 NVIDIA H200: 702.6 TFLOP/s (at least 593.6)" in text and "SW power cap" in text


def test_each_way_a_gpu_fails_the_burnin_is_named_with_its_figure():
    result = load("burnin", "h200x2-healthy.json")
    bad = copy.deepcopy(result)
    bad["gpus"][0].update(tflops=512.3, wrong_elements=17)
    bad["samples"][-1]["gpus"][0].update(reasons=0x4 | 0x20, temp_c=88)  # SW thermal slowdown at 88 C
    bad["gpus"][1] = {"index": 1, "error": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    found = gpu_burnin.problems(bad, limits(), 2)
    assert found == [
        "GPU 0: burn-in wrong elements in 12800 products: expected 0, actual 17 (a hardware error)",
        "GPU 0: burn-in FP16 TFLOP/s: expected at least 593.6, actual 512.3 (max 88 C, SM 1980 MHz, clock event "
        "reasons: SW power cap (x3), SW thermal slowdown (x1))",
        "GPU 0: burn-in temperature: expected at most 85 C, actual 88 C",
        "GPU 0: burn-in clock event reasons: expected none of thermal, HW slowdown or power brake, actual SW thermal "
        "slowdown (x1) of 4 samples",
        "GPU 1: burn-in: expected to run, actual: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]


def test_a_burnin_on_fewer_gpus_than_the_profile_and_one_that_did_not_start():
    result = load("burnin", "h200x2-healthy.json")
    assert gpu_burnin.problems(result, limits(), 8)[0] == "burn-in: GPUs loaded: expected 8, actual 2"
    assert gpu_burnin.problems({"error": "cannot count GPUs through NVML: Driver Not Loaded"}, limits(), 1) == [
        "burn-in: expected to run, actual: cannot count GPUs through NVML: Driver Not Loaded"]
    wrong = copy.deepcopy(result)
    wrong["gpus"][1]["known_result"] = False
    assert "GPU 1: burn-in known result" in gpu_burnin.problems(wrong, limits(), 2)[0]


def test_clock_event_reasons_are_named_from_nvmls_bits():
    assert gpu_burnin.reason_names(0x4 | 0x40) == ["SW power cap", "HW thermal slowdown"]
    assert gpu_burnin.reason_names(0) == [] and gpu_burnin.reason_names(None) == []
    assert gpu_burnin.reason_names(0x1000) == ["0x1000"]


def test_the_smoke_test_fails_per_gpu_with_what_went_wrong():
    ok = {"checks": {"memory": "ok", "matmul_fp32": "ok", "matmul_fp16": "ok"}, "device_count": 2}
    result = {"gpus": [{"index": 0, "name": "NVIDIA H200", **ok},
                       {"index": 1, "name": "NVIDIA H200", "device_count": 2,
                        "checks": {"memory": "ok", "matmul_fp32": "ok", "matmul_fp16": "3 wrong element(s)"}}]}
    assert gpu_health.smoke_problems(result, 2) == ["GPU 1: CUDA matmul_fp16: expected ok, actual 3 wrong element(s)"]
    hung = {"gpus": [{"index": 0, **ok}, {"index": 1, "error": "no answer within 120 s (exit code None): a hung GPU, "
                                                                 "or CUDA stuck starting on it"}]}
    assert gpu_health.smoke_problems(hung, 3) == [
        "CUDA smoke test: GPUs: expected 3, actual 2",
        "GPU 1: CUDA: expected to compute, actual: no answer within 120 s (exit code None): a hung GPU, or CUDA "
        "stuck starting on it"]


# --- vLLM's weights load lines ---------------------------------------------------------------------

def line(inv: str, at: int, message: str) -> dict:
    return {"invocation": inv, "at": at, "message": message}


def test_load_times_per_start_from_the_servers_own_lines():
    lines = [
        # vLLM 0.32.0 CPU, as the lab's journal has it (one process)
        line("a1", 1_796_227_873_000_000, "(EngineCore pid=4649) INFO 12-02 16:11:13 [default_loader.py:501] "
                                          "Loading weights took 0.01 seconds"),
        # vLLM 0.19.1 on GPUs with two workers (default_loader.py:385, gpu_model_runner.py:4821): the slowest counts
        line("b2", 1_796_300_000_000_000, "(Worker_TP0 pid=101) INFO 12-03 12:13:20 [default_loader.py:385] Loading "
                                          "weights took 41.27 seconds"),
        line("b2", 1_796_300_000_500_000, "(Worker_TP1 pid=102) INFO 12-03 12:13:20 [default_loader.py:385] Loading "
                                          "weights took 43.90 seconds"),
        line("b2", 1_796_300_001_000_000, "(Worker_TP1 pid=102) INFO 12-03 12:13:21 [gpu_model_runner.py:4821] Model "
                                          "loading took 64.52 GiB memory and 47.113018 seconds"),
        line("b2", 1_796_300_001_100_000, "(APIServer pid=99) INFO Reloading and processing weights took 1.00 seconds"),
    ]
    older, now = vllm_logs.starts(lines)
    assert (older.invocation, older.weights_s, older.model_s, older.workers) == ("a1", 0.01, None, 1)
    assert (now.weights_s, now.model_s, now.workers) == (43.9, 47.113018, 2)
    current, every = vllm_logs.current({"current": "b2", "lines": lines})
    assert current == now and every == [older, now]
    assert vllm_logs.current({"current": "c3", "lines": lines})[0] is None  # this start wrote none (yet)


def test_the_v1_gpu_runners_shorter_line_is_read_too():
    [s] = vllm_logs.starts([line("x", 1, "INFO [model_runner.py:292] Model loading took 14.2 GiB and 9.5 seconds")])
    assert (s.weights_s, s.model_s) == (None, 9.5)


# --- acceptance results ----------------------------------------------------------------------------

KEPT = {"model_storage": {"read_mbs": 3400.0, "read_latency_ms": 0.12},
        "gpu_burnin": {"0": {"tflops": 702.6, "max_temp_c": 71}},
        "dcgm_diag_r3": {"per_gpu": {"0": {"memory": "Pass", "pcie": "Pass"}}},
        "vllm_weights_load": {"vllm.service": {"weights_s": 42.0}}}


def test_a_later_run_as_good_as_acceptance_has_no_differences():
    later = copy.deepcopy(KEPT)
    later["model_storage"]["read_mbs"] = 3100.0  # 9 % slower: within 0.25
    later["vllm_weights_load"]["vllm.service"]["weights_s"] = 44.5  # within the noise (5 s)
    assert onboard_acceptance.compare(KEPT, later, 0.25) == []


def test_a_later_run_worse_beyond_the_tolerance_names_each_figure():
    later = copy.deepcopy(KEPT)
    later["model_storage"]["read_mbs"] = 1200.0
    later["gpu_burnin"]["0"]["tflops"] = 480.0
    later["dcgm_diag_r3"]["per_gpu"]["0"]["pcie"] = "Fail"
    later["vllm_weights_load"]["vllm.service"]["weights_s"] = 130.0
    found = {d.what: (d.kept, d.now, d.why) for d in onboard_acceptance.compare(KEPT, later, 0.25)}
    assert found == {
        "model storage: sequential read": ("3400 MB/s", "1200 MB/s",
                                           "65% worse than at acceptance (acceptance_tolerance 0.25, higher is "
                                           "better)"),
        "GPU 0: burn-in": ("702.6 TFLOP/s", "480 TFLOP/s",
                           "32% worse than at acceptance (acceptance_tolerance 0.25, higher is better)"),
        "GPU 0: dcgmi diag -r 3 pcie": ("Pass", "Fail", "at acceptance it passed"),
        "vllm.service: weights load time": ("42 s", "130 s",
                                            "210% worse than at acceptance (acceptance_tolerance 0.25, lower is "
                                            "better)"),
    }


def test_the_acceptance_result_is_kept_and_later_runs_beside_it(tmp_path):
    onboard_acceptance.record(tmp_path, "gpu-1", {"at": "2026-12-02T10:00:00+00:00", "figures": KEPT})
    assert onboard_acceptance.load(tmp_path, "gpu-1")["figures"] == KEPT
    assert onboard_acceptance.latest_run(tmp_path, "gpu-1") == (None, None)
    onboard_acceptance.record_run(tmp_path, "gpu-1", {"at": "2026-12-09T10:00:00+00:00", "figures": {}})
    run, path = onboard_acceptance.latest_run(tmp_path, "gpu-1")
    assert run["at"].startswith("2026-12-09") and path.parent == onboard_acceptance.runs_dir(tmp_path, "gpu-1")
    assert onboard_acceptance.load(tmp_path, "gpu-1")["at"].startswith("2026-12-02")


def test_the_audit_holds_the_running_servers_load_time_and_a_later_run_to_the_kept_result(tmp_path):
    from llmfleet.audit.run import acceptance_problems

    h = {"name": "gpu-1", "data": {"acceptance_tolerance": 0.25}}
    problems, notes = acceptance_problems("inventories/prod.py", h, tmp_path, {})
    assert problems == [] and notes[0].startswith("no acceptance result kept in")
    onboard_acceptance.record(tmp_path, "gpu-1", {"at": "2026-12-02T10:00:00+00:00", "figures": KEPT})
    now = {"vllm_weights_load": {"vllm.service": {"weights_s": 95.0}}}
    [p], notes = acceptance_problems("inventories/prod.py", h, tmp_path, now)
    assert (p.kind, p.check, p.expected, p.actual) == ("hardware", "acceptance: vllm.service: weights load time",
                                                       "42 s", "95 s")
    assert "llmfleet onboard inventories/prod.py --limit gpu-1 --restart" in p.repair
    onboard_acceptance.record_run(tmp_path, "gpu-1", {"at": "2026-12-09T10:00:00+00:00",
                                              "figures": {"model_storage": {"read_mbs": 900.0,
                                                                            "read_latency_ms": 0.12}}})
    problems, notes = acceptance_problems("inventories/prod.py", h, tmp_path, now)
    assert [p.what for p in problems] == ["model storage: sequential read", "vllm.service: weights load time"]
    assert "the later acceptance run of 2026-12-09T10:00:00+00:00" in notes[0]
