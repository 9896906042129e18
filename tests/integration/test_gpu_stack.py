"""The GPU stack on hosts without an NVIDIA GPU (every lab host): the NVIDIA components do
nothing, say why on every run, and leave nothing behind. (The GPU checks themselves run on the
lent H200: `make verify-device`; the operations' decisions are tested in tests/ops.)"""

import json

from harness import BIN, lab_ssh, run, state

from llmfleet.schema import defaults as schema_defaults

COMPONENTS = ("nvidia_driver", "cuda_toolkit", "nvidia_persistence", "gpu_clocks", "dcgm_exporter")
LEFT_BEHIND = ("/etc/apt/sources.list.d/llmfleet-nvidia-cuda.sources", "/etc/apt/keyrings/llmfleet-nvidia-cuda.gpg",
               "/etc/apt/preferences.d/90-llmfleet-nvidia",
               "/etc/modprobe.d/90-llmfleet-nouveau.conf", "/etc/systemd/system/llmfleet-gpu-clocks.service",
               "/etc/systemd/system/nvidia-persistenced.service.d", "/etc/dcgm-exporter",
               "/etc/systemd/system/nvidia-dcgm-exporter.service")


def one_line(text: str) -> str:
    """pyinfra pads host names to a common width: compare with whitespace folded."""
    return " ".join(text.split())


def test_gpu_components_say_why_they_skip_and_change_nothing(lab, deployed):
    output = one_line(deployed.output)
    for name in state()["hosts"]:
        for component in COMPONENTS:
            line = f"[{name}] {component}: skipped: no NVIDIA GPU on this host (no PCI display device of vendor 0x10de)"
            assert line in output, f"{name}: no skip line for {component}"
        present = lab_ssh(name, "for f in " + " ".join(LEFT_BEHIND) + "; do [ -e $f ] && echo $f; done; true")
        assert present.stdout.split() == [], (name, present.stdout)


def test_a_gpu_profile_on_a_host_without_gpus_is_pointed_out(lab, deployed):
    proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "deploy.py", "--dry", "--limit", "lab-c1",
               "--data", "gpu_profile=v100_sxm2_32gb_x8",
               # a vLLM with V100 kernels, or the guardrails stop the run before the GPU components speak
               "--data", 'vllm_version="0.19.1"', "--data", 'vllm_packages=["vllm==0.19.1"]')
    out = one_line(proc.stdout + proc.stderr)
    assert ("[lab-c1] nvidia_driver: skipped: no NVIDIA GPU on this host (no PCI display device of vendor 0x10de), "
            "but gpu_profile 'v100_sxm2_32gb_x8' expects 8 x Tesla V100-SXM2-32GB: check the hardware") in out, \
        out[-3000:]


def test_nvidia_host_fact_reads_each_host(lab, deployed):
    proc = run(str(BIN / "pyinfra"), "inventories/lab.py", "fact", "llmfleet.facts.NvidiaHost", "--json")
    facts = json.loads(proc.stdout)["llmfleet.facts.NvidiaHost"]
    assert set(facts) == set(state()["hosts"])
    for name, fact in facts.items():
        assert (fact["os"], fact["os_version"]) == ("debian", "12"), name
        assert fact["pci_gpus"] == [] and fact["module"] is None and fact["smi"] == [], (name, fact)
        assert fact["kernel"] and isinstance(fact["packages"], dict) and isinstance(fact["held"], list), (name, fact)


def test_the_allreduce_check_runs_its_code_path_on_a_lab_host(lab, deployed):
    """llmfleet/remote/gpu_interconnect_allreduce.py on a real host with the vLLM environment's torch: the same
    fork / rendezvous / sum check / timing path as on GPUs, with gloo on the CPU (2 ranks). On
    GPUs it runs with NCCL on the lent 2 x H200 (`make verify-device`)."""
    from llmfleet.remote import python_script

    def allreduce(*args: str) -> dict:  # as verify runs it: the one runner, the vLLM environment's python
        proc = lab_ssh("lab-c1", python_script("gpu_interconnect_allreduce", *args,
                                               python="/opt/llmfleet/vllm/current/bin/python3"))
        return json.loads(proc.stdout)

    result = allreduce("1,4", "3", "1", "120", "gloo", "2")
    assert "error" not in result, result
    assert result["world"] == 2 and [r["size_mib"] for r in result["results"]] == [1, 4]
    for r in result["results"]:
        assert r["wrong_elements"] == 0 and r["busbw_gbs"] > 0 and r["bytes"] == r["size_mib"] << 20, r
    # the check's own verdict on it, with a profile for two GPUs and no thresholds
    from llmfleet import gpu_interconnect
    from llmfleet.schema import GpuProfile

    profiles = schema_defaults()["gpu_profiles"]
    two = GpuProfile(**(profiles["h200_141gb_x2"] | {"allreduce_min_busbw_gbs": {}}))
    assert gpu_interconnect.allreduce_problems(two, result) == []
    # ranks that fail (here an unknown backend) are reported with their error, not waited for
    bad = allreduce("1", "1", "0", "60", "nope", "2")
    assert "rank 0:" in bad["error"] and "nope" in bad["error"].lower(), bad
