"""GPU hardware as its profile says (gpu_profiles in group data), read through NVML: the checks
that catch a card in an x8 slot, NVLink down, ECC trouble, Xid errors, and a PyTorch without
kernels for the GPU. Each failure names host, GPU index, expected and actual."""

from llmfleet import gpu_health
from llmfleet.gpu_health import kernels_that_run
from verify.helpers import expect, expect_each, read_files, run_remote


def _gpus(gpu_state) -> list[dict]:
    return gpu_state["nvml"]["gpus"]


def test_pci_gpu_count(host, host_name, settings):
    """NVIDIA GPUs on the PCI bus, whether or not a driver sees them (0 for gpu_profile None)."""
    profile = settings.profile
    found = run_remote(host, "pci_gpus")
    expect(host_name, f"NVIDIA GPUs on PCI (gpu_profile {settings.gpu_profile})",
           profile.count if profile else 0, len(found))


def test_count_and_model(host_name, settings, gpu_profile, gpu_state):
    gpus = _gpus(gpu_state)
    wrong = []
    if len(gpus) != gpu_profile.count:
        wrong.append(f"{host_name}: GPU count (gpu_profile {settings.gpu_profile}): expected {gpu_profile.count}, "
                     f"actual {len(gpus)}")
    for g in gpus:
        for what, want, got in (("model", gpu_profile.model_name, g["name"]),
                                ("PCI device id", gpu_profile.pci_device_id, g["pci_device_id"])):
            if got != want:
                wrong.append(f"{host_name} GPU {g['index']}: {what}: expected {want}, actual {got}")
    assert not wrong, "\n".join(wrong)


def test_memory(host_name, gpu_profile, gpu_state):
    low, high = int(gpu_profile.memory_mib * 0.97), int(gpu_profile.memory_mib * 1.01)
    expect_each(host_name, f"memory (MiB, nominal {gpu_profile.memory_mib})", f"{low}-{high} MiB",
                {g["index"]: f"{low}-{high} MiB" if isinstance(g["memory_mib"], int) and low <= g["memory_mib"] <= high
                 else f"{g['memory_mib']} MiB" for g in _gpus(gpu_state)})


def test_ecc(host_name, settings, gpu_profile, gpu_state):
    """ECC as the profile says: on (and no volatile uncorrectable error), off (a GeForce's default), or
    none at all (NVML: Not Supported)."""
    gpus = _gpus(gpu_state)
    setting = f"gpu_profiles.{settings.gpu_profile}.ecc = {gpu_profile.ecc}"
    if gpu_profile.ecc == "none":
        expect_each(host_name, f"ECC mode ({setting})", "not supported",
                    {g["index"]: "not supported" if "Not Supported" in str(g["ecc_current"]) else g["ecc_current"]
                     for g in gpus})
        return
    want = 1 if gpu_profile.ecc == "on" else 0
    expect_each(host_name, f"ECC mode, current ({setting})", want, {g["index"]: g["ecc_current"] for g in gpus})
    expect_each(host_name, f"ECC mode, pending after the next reset ({setting})", want,
                {g["index"]: g["ecc_pending"] for g in gpus})
    if gpu_profile.ecc == "on":
        expect_each(host_name, "volatile uncorrectable ECC errors", 0,
                    {g["index"]: g["ecc_volatile_uncorrected"] for g in gpus})


def test_memory_error_management(host_name, gpu_profile, gpu_state):
    """Page retirement (up to Volta): no page waiting to be retired. Row remapping (A100 and newer):
    no remap pending, no remap failure."""
    gpus = _gpus(gpu_state)
    if gpu_profile.memory_errors == "page_retirement":
        expect_each(host_name, "retired pages pending (page retirement)", 0,
                    {g["index"]: g["retired_pages_pending"] for g in gpus})
    else:
        expect_each(host_name, "remapped rows (row remapping): pending, failure", {"pending": False, "failure": False},
                    {g["index"]: {k: g["remapped_rows"].get(k) for k in ("pending", "failure")}
                     if "error" not in g["remapped_rows"] else g["remapped_rows"] for g in gpus})


def test_pcie_link(host_name, gpu_profile, gpu_state):
    """The link the GPU and its slot can train to (an x8 slot or a Gen1 riser shows here), and the
    width it runs at now. The current generation is not checked: GPUs drop it when idle."""
    gpus = _gpus(gpu_state)
    expect_each(host_name, "PCIe generation (max of GPU and slot)", gpu_profile.pcie_gen,
                {g["index"]: g["pcie_max_gen"] for g in gpus})
    expect_each(host_name, "PCIe width (max of GPU and slot)", gpu_profile.pcie_width,
                {g["index"]: g["pcie_max_width"] for g in gpus})
    expect_each(host_name, "PCIe width (current)", gpu_profile.pcie_width, {g["index"]: g["pcie_width"] for g in gpus})


def test_nvlink(host_name, gpu_profile, gpu_state):
    expect_each(host_name, "NVLink links up", gpu_profile.nvlink_links,
                {g["index"]: sum(1 for s in g["nvlink_states"] if s == 1) for g in _gpus(gpu_state)})


def test_no_xid_errors(host_name, gpu_state):
    xid = gpu_state["xid"]
    assert "error" not in xid, f"{host_name}: kernel log: expected readable, actual: {xid['error']}"
    expect(host_name, f"NVRM Xid errors since boot ({xid['source']})", [], xid["lines"])


def test_torch_has_kernels_for_the_gpu(host_name, settings, gpu_profile, gpu_state):
    torch = gpu_state["torch"]
    assert "error" not in torch, (f"{host_name}: PyTorch in {settings.vllm_venv}: expected importable, "
                                  f"actual: {torch['error']}")
    # a cubin of the same major and a lower minor runs too (sm_86 on an RTX 4090's 8.9): llmfleet.gpu_guardrails
    assert kernels_that_run(torch["arch_list"], gpu_profile.compute_capability), (
        f"{host_name}: PyTorch {torch['version']} in {settings.vllm_venv}: expected kernels that run on "
        f"{gpu_profile.arch} ({gpu_profile.model_name}: a cubin of its major version at or below its minor, or "
        f"PTX at or below it), actual kernels for {', '.join(torch['arch_list']) or 'no architecture'}")


def test_cuda_computes_on_every_gpu(host, host_name, settings, gpu_profile, gpu_state, record_property):
    """The CUDA smoke test (llmfleet/remote/gpu_health_smoke.py, the vLLM environment's PyTorch, every GPU at
    once): allocate and copy 256 MiB, multiply known matrices in FP32 and FP16, compare with the known
    result. A GPU that NVML lists but CUDA cannot use fails here by name (NVIDIA/gpu-operator#2685, #2781:
    a validator that reported ready while CUDA could not run)."""
    smoke = run_remote(host, "gpu_health_smoke", str(settings.gpu_smoke_timeout_s),
                       python=f"{settings.vllm_venv}/bin/python3")
    record_property("cuda_smoke", {str(g["index"]): g.get("checks") or g.get("error") for g in smoke.get("gpus", [])})
    problems = gpu_health.smoke_problems(smoke, gpu_profile.count)
    assert not problems, "\n".join(f"{host_name} {p}" if p.startswith("GPU") else f"{host_name}: {p}"
                                   for p in problems)


def test_nouveau_not_loaded(host, host_name, gpu_profile):
    modules = read_files(host, "/proc/modules")["/proc/modules"] or ""
    expect(host_name, "nouveau loaded", False, any(ln.split()[0] == "nouveau" for ln in modules.splitlines()))
