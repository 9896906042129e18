"""The GPU health checks' judgements (verify/test_gpu_health.py): which kernels of a PyTorch build run
on a GPU, and the CUDA smoke test's failures (llmfleet/remote/gpu_health_smoke.py's report). Pure: no I/O."""

from __future__ import annotations


def kernels_that_run(arch_list: list[str], compute_capability: float) -> list[str]:
    """The entries of a PyTorch build's arch list (torch.cuda.get_arch_list()) whose code runs on a
    GPU of this compute capability. CUDA C++ Programming Guide, "Binary Compatibility": a cubin for
    X.y runs on X.z where z >= y (so PyTorch's sm_86 runs an RTX 4090, 8.9; PyTorch's own
    _check_cubins accepts any cubin of the same major, torch/cuda/__init__.py); an arch-specific
    cubin (sm_90a) only on exactly X.y; "PTX Compatibility": PTX (compute_XY) is compiled by the
    driver for any X.Y and newer."""
    major, minor = (int(x) for x in f"{compute_capability:.1f}".split("."))
    out = []
    for arch in arch_list:
        kind, _, version = arch.partition("_")
        digits = version.rstrip("af")
        if not digits.isdigit() or len(digits) < 2:
            continue
        x, y = int(digits[:-1]), int(digits[-1])
        if kind == "sm" and version.endswith("a"):
            runs = (x, y) == (major, minor)
        elif kind == "sm":
            runs = x == major and y <= minor
        else:  # compute_XY: PTX, compiled for this GPU at load
            runs = (x, y) <= (major, minor)
        if runs:
            out.append(arch)
    return out


def smoke_problems(result: dict, count: int) -> list[str]:
    """The CUDA smoke test's failures, per GPU: `GPU i: check: expected ok, actual ...`."""
    if result.get("error"):
        return [f"CUDA smoke test: expected to run, actual: {result['error']}"]
    out = []
    gpus = result.get("gpus", [])
    if len(gpus) != count:
        out.append(f"CUDA smoke test: GPUs: expected {count}, actual {len(gpus)}")
    seen = {g.get("device_count") for g in gpus if g.get("device_count") is not None}
    if seen and seen != {len(gpus)}:
        out.append(f"CUDA smoke test: GPUs PyTorch sees: expected {len(gpus)} (NVML's), actual "
                   f"{', '.join(map(str, sorted(seen)))}")
    for g in gpus:
        if g.get("error"):
            out.append(f"GPU {g['index']}: CUDA: expected to compute, actual: {g['error']}")
            continue
        out += [f"GPU {g['index']}: CUDA {name}: expected ok, actual {state}"
                for name, state in g["checks"].items() if state != "ok"]
    return out
