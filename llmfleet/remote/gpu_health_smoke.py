"""The CUDA smoke test: on every GPU at once, with the vLLM environment's PyTorch, allocate, copy
and compute, each compared with the known result. Prints one JSON object; each GPU's checks and
errors are its own. Run with the vLLM environment's python (torch, nvidia-ml-py).

    python3 gpu_health_smoke.py TIMEOUT_S [BACKEND WORLD]

BACKEND is cuda (every GPU NVML lists) or cpu with WORLD processes: the same code path on a host
without GPUs. Per GPU (one process each, forked before CUDA starts, so a GPU that hangs or breaks
its CUDA context leaves the others' results whole; GPUs numbered as nvidia-smi numbers them):

- memory: 256 MiB written on the GPU with a pattern (i mod 251), read back to the host, compared;
- matmul_fp32: two 512 x 512 matrices of -1, 0, 1 multiplied in FP32 without TF32, compared with
  the CPU's float64 product (integers: exact, so any difference is an error);
- matmul_fp16: the same product in FP16 on the tensor cores (every element below 2048: exact).

A GPU that gives no answer within TIMEOUT_S fails as hung. Read-only: no GPU setting is touched.
"""

import json
import os
import sys
import time

from _helpers import nvml_gpu_count, run_ranks  # llmfleet/remote/_helpers.py, sent along by python_script

N = 512
MEMORY_MIB = 256


def _worker(rank, backend, queue):
    out = {"checks": {}}
    try:
        import torch

        if backend == "cuda":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
            torch.backends.cuda.matmul.allow_tf32 = False
            out["name"] = torch.cuda.get_device_name(device)
            out["torch"], out["cuda"] = torch.__version__, torch.version.cuda
            out["device_count"] = torch.cuda.device_count()
        else:
            device = torch.device("cpu")
            out["name"], out["torch"] = "cpu", torch.__version__
        started = time.perf_counter()

        def check(name, fn):
            try:
                wrong = fn()
                out["checks"][name] = "ok" if wrong == 0 else f"{wrong} wrong element(s)"
            except Exception as exc:  # noqa: BLE001 - the failure is the result
                out["checks"][name] = f"{type(exc).__name__}: {exc}"[:600]

        def memory():
            n = MEMORY_MIB * 2**20
            pattern = torch.arange(251, dtype=torch.uint8)
            on_gpu = pattern.to(device).repeat(n // 251 + 1)[:n]
            back = on_gpu.cpu()
            wrong = int((back.view(-1)[: n // 251 * 251].view(-1, 251) != pattern).sum())
            del on_gpu
            return wrong

        gen = torch.Generator().manual_seed(1729 + rank)
        a = torch.randint(-1, 2, (N, N), generator=gen, dtype=torch.int8)
        b = torch.randint(-1, 2, (N, N), generator=gen, dtype=torch.int8)
        want = (a.double() @ b.double()).float()

        def matmul(dtype):
            def run():
                got = (a.to(device).to(dtype) @ b.to(device).to(dtype)).float().cpu()
                return int((got != want).sum())
            return run

        check("memory", memory)
        check("matmul_fp32", matmul(torch.float32))
        check("matmul_fp16", matmul(torch.float16 if backend == "cuda" else torch.float32))
        if backend == "cuda":
            torch.cuda.synchronize(device)
        out["ms"] = round((time.perf_counter() - started) * 1000, 1)
    except Exception as exc:  # noqa: BLE001 - CUDA could not start on this GPU
        out["error"] = f"{type(exc).__name__}: {exc}"[:800]
    queue.put((rank, out))


def main(argv):
    timeout_s = float(argv[1])
    backend = argv[2] if len(argv) > 2 else "cuda"
    out = {"backend": backend}
    try:
        world = int(argv[3]) if len(argv) > 3 else nvml_gpu_count()
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"cannot count GPUs through NVML: {exc}"
        return out
    out["world"] = world
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's device i is NVML's GPU i (this process only)
    replies, exits, out["seconds"] = run_ranks(_worker, lambda r: (backend,), world, timeout_s, dependent=False)
    out["gpus"] = [{"index": r, **replies[r]} if r in replies else
                   {"index": r, "error": f"no answer within {timeout_s:.0f} s (exit code {exits[r]}): "
                                         "a hung GPU, or CUDA stuck starting on it"} for r in range(world)]
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv)))
