"""An all-reduce across every GPU of the host, one process per GPU (PyTorch distributed over NCCL),
at each size asked: the right sum, and the time per operation. Prints one JSON object.

    python3 gpu_interconnect_allreduce.py SIZES_MIB ITERS WARMUP TIMEOUT_S [BACKEND WORLD]

SIZES_MIB is comma-separated (e.g. 1,4,16,64,256,1024). BACKEND is nccl (the GPUs) or gloo with
WORLD processes on the CPU: the same code path on a host without GPUs (the lab's test of it).

The result check: each rank fills a float32 buffer with (i mod 97) + rank at index i; after the
sum every element must be WORLD * (i mod 97) + WORLD * (WORLD - 1) / 2, exact in float32, so a
lost, stale or misplaced chunk shows. Timing: after WARMUP operations, ITERS in-place all-reduces
between two barriers, timed with CUDA events on each rank; the slowest rank's mean counts (as
nccl-tests does). algbw = bytes / time, busbw = algbw * 2 (WORLD - 1) / WORLD (nccl-tests'
PERFORMANCE.md: the bandwidth each link carries in a ring, comparable across GPU counts).

Read-only: no GPU setting is touched, and the environment is passed on as it is (NCCL_* variables
a machine sets, such as NCCL_NVLS_ENABLE=0, stay in force). The processes are forked before CUDA
is initialised (the parent counts GPUs through NVML), so the script runs from `python -c`.
"""

import json
import os
import socket
import sys
import time

from _helpers import nvml_gpu_count, run_ranks  # llmfleet/remote/_helpers.py, sent along by python_script


def _worker(rank, world, port, backend, sizes_mib, iters, warmup, queue):
    try:
        import torch
        import torch.distributed as dist

        gpu = backend == "nccl"
        if gpu:
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        kwargs = {"device_id": device} if gpu else {}
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                **kwargs)
        results = []
        for size in sizes_mib:
            n = size * 1024 * 1024 // 4
            # period 97, built without a second buffer of the full size (a serving GPU has little free)
            period = torch.arange(97, device=device, dtype=torch.float32)
            buf = period.repeat(n // 97 + 1)[:n].add_(rank)
            dist.all_reduce(buf)
            want = period.mul_(world).add_(world * (world - 1) / 2)
            m = n // 97 * 97
            wrong = int((buf[:m].view(-1, 97) != want).sum().item()) + int((buf[m:] != want[:n - m]).sum().item())
            buf.zero_()  # timed sums of zeros stay finite
            for _ in range(warmup):
                dist.all_reduce(buf)
            if gpu:
                torch.cuda.synchronize()
            dist.barrier()
            if gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            if gpu:
                end.record()
                torch.cuda.synchronize()
                seconds = start.elapsed_time(end) / 1000.0
            else:
                seconds = time.perf_counter() - t0
            del buf
            # the slowest rank's time counts; wrong elements summed over ranks
            stats = torch.tensor([seconds / iters, float(wrong)], dtype=torch.float64, device=device)
            worst = stats.clone()
            dist.all_reduce(worst[:1], op=dist.ReduceOp.MAX)
            dist.all_reduce(worst[1:], op=dist.ReduceOp.SUM)
            results.append({"size_mib": size, "bytes": n * 4, "time_us": worst[0].item() * 1e6,
                            "wrong_elements": int(worst[1].item())})
        info = {}
        if rank == 0:
            info["torch"] = torch.__version__
            if gpu:
                info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        dist.destroy_process_group()
        queue.put((rank, {"results": results, **info}))
    except Exception as exc:
        # the exception itself (NCCL's own message names the cause), not the whole traceback
        queue.put((rank, {"error": f"{type(exc).__name__}: {exc}"[:800]}))


def main(argv):
    sizes_mib = [int(x) for x in argv[1].split(",")]
    iters, warmup, timeout_s = int(argv[2]), int(argv[3]), float(argv[4])
    backend = argv[5] if len(argv) > 5 else "nccl"
    out = {"backend": backend, "sizes_mib": sizes_mib, "iters": iters, "warmup": warmup,
           "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "TORCH_NCCL"))}}
    try:
        world = int(argv[6]) if len(argv) > 6 else nvml_gpu_count()
    except Exception as exc:
        out["error"] = f"cannot count GPUs through NVML: {exc}"
        return out
    out["world"] = world
    if world < 2:
        out["error"] = f"{world} GPU(s): an all-reduce needs at least 2"
        return out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    replies, exits, out["seconds"] = run_ranks(
        _worker, lambda r: (world, port, backend, sizes_mib, iters, warmup), world, timeout_s, dependent=True)
    errors = {r: v["error"] for r, v in replies.items() if "error" in v}
    missing = [r for r in range(world) if r not in replies]
    if errors or missing:
        out["error"] = "; ".join([f"rank {r}: {e}" for r, e in sorted(errors.items())]
                                 + ([f"ranks {missing} did not finish within {timeout_s:.0f} s (exit codes "
                                     f"{[exits[r] for r in missing]})"] if missing else []))
        return out
    first = replies[0]
    out.update({k: v for k, v in first.items() if k != "results"})
    for r in first["results"]:
        algbw = r["bytes"] / (r["time_us"] / 1e6) / 1e9
        r["algbw_gbs"] = round(algbw, 2)
        r["busbw_gbs"] = round(algbw * 2 * (world - 1) / world, 2)
        r["time_us"] = round(r["time_us"], 1)
    out["results"] = first["results"]
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv)))
