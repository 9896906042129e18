"""A bounded burn-in: every GPU at once under a full FP16 matrix-multiply load for SECONDS, every
result checked against the exactly known one, NVML read every INTERVAL_S. Prints one JSON object.
Run with the vLLM environment's python (torch, nvidia-ml-py). Judged by llmfleet/gpu_burnin.py.

    python3 gpu_burnin.py SECONDS N INTERVAL_S [BACKEND WORLD]

BACKEND is cuda (the GPUs, FP16) or cpu with WORLD processes (float32, small N): the same code path
on a host without GPUs.

Each GPU multiplies two N x N matrices of -1, 0 and 1 (drawn from a seed per GPU), so every element
of the product is an integer of magnitude far below 2048, exact in FP16 whatever the order of the
additions. The known result: the product in FP32 without TF32 on the GPU, itself checked on the CPU
in float64 for a block of 8 rows x 256 columns. Then as many products as fit in SECONDS, in batches
of about a quarter of a second, each batch's last product compared element by element with the
known one (a wrong element is a hardware error). TFLOP/s = 2 N^3 x products / seconds, overall and
per sampling interval (from the products each process has finished).

NVML, read by the parent every INTERVAL_S while the GPUs work: GPU and memory temperature, SM and
memory clocks, power, utilisation and the clock event reasons (nvmlDeviceGetCurrentClocksEventReasons,
a bitmask). GPUs are numbered as NVML and nvidia-smi number them (CUDA_DEVICE_ORDER=PCI_BUS_ID).

Read-only: no GPU setting is touched (clocks, power limits, persistence stay as they are). The
processes are forked before CUDA is initialised (the parent counts GPUs through NVML).
"""

import json
import multiprocessing as mp
import os
import sys
import threading
import time
from queue import Empty

CHECK_ROWS, CHECK_COLS = 8, 256
BATCH_SECONDS = 0.25


def _worker(rank, backend, n, seconds, progress, barrier, queue):
    try:
        import torch

        if backend == "cuda":
            torch.cuda.set_device(rank)
            device, dtype = torch.device("cuda", rank), torch.float16
            torch.backends.cuda.matmul.allow_tf32 = False  # the known result in exact FP32

            def sync():
                torch.cuda.synchronize(device)
            name = torch.cuda.get_device_name(device)
        else:
            device, dtype = torch.device("cpu"), torch.float32
            torch.set_num_threads(1)

            def sync():
                pass
            name = "cpu"
        gen = torch.Generator().manual_seed(20261202 + rank)
        a8 = torch.randint(-1, 2, (n, n), generator=gen, dtype=torch.int8)
        b8 = torch.randint(-1, 2, (n, n), generator=gen, dtype=torch.int8)
        want_block = a8[:CHECK_ROWS].double() @ b8[:, :CHECK_COLS].double()
        a, b = a8.to(device).to(dtype), b8.to(device).to(dtype)
        known = a8.to(device).float() @ b8.to(device).float()
        known_ok = bool(torch.equal(known[:CHECK_ROWS, :CHECK_COLS].cpu().double(), want_block))
        largest = int(known.abs().max().item())
        known = known.to(dtype)
        out = torch.empty_like(known)
        del a8, b8
        # warm-up, and the batch size: about BATCH_SECONDS of products between two checks
        torch.matmul(a, b, out=out)
        sync()
        t = time.perf_counter()
        for _ in range(3):
            torch.matmul(a, b, out=out)
        sync()
        batch = max(1, int(BATCH_SECONDS / max((time.perf_counter() - t) / 3, 1e-6)))
        wrong = int((out != known).sum().item())
        checks = 1
        barrier.wait(timeout=600)
        started = time.perf_counter()
        done = 0
        while time.perf_counter() - started < seconds:
            for _ in range(batch):
                torch.matmul(a, b, out=out)
            wrong += int((out != known).sum().item())  # waits for the batch
            checks += 1
            done += batch
            progress[rank] = done
        elapsed = time.perf_counter() - started
        queue.put((rank, {"name": name, "products": done, "seconds": round(elapsed, 2), "batch": batch,
                          "tflops": round(2 * n ** 3 * done / elapsed / 1e12, 2), "wrong_elements": wrong,
                          "checks": checks, "known_result": known_ok, "largest_element": largest,
                          "torch": torch.__version__}))
    except threading.BrokenBarrierError:
        queue.put((rank, {"error": "not started: another GPU failed while preparing (its error is beside it)"}))
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        try:
            barrier.abort()  # the others stop waiting for this one
        except Exception:  # noqa: BLE001
            pass
        queue.put((rank, {"error": f"{type(exc).__name__}: {exc}"[:800]}))


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception as exc:  # noqa: BLE001
        return str(exc)


def _field(n, handle, field_id):
    """A value of nvmlDeviceGetFieldValues, or None where the GPU has none."""
    try:
        v = n.nvmlDeviceGetFieldValues(handle, [field_id])[0]
        if v.nvmlReturn != 0:
            return None
        kind = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(v.valueType, "uiVal")
        return getattr(v.value, kind)
    except Exception:  # noqa: BLE001
        return None


def _read(n, index):
    h = n.nvmlDeviceGetHandleByIndex(index)

    def get(fn, *args):
        try:
            return fn(h, *args)
        except n.NVMLError:
            return None

    reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        n.nvmlDeviceGetCurrentClocksThrottleReasons
    power = get(n.nvmlDeviceGetPowerUsage)
    util = get(n.nvmlDeviceGetUtilizationRates)
    return {"index": index, "temp_c": get(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
            "mem_temp_c": _field(n, h, getattr(n, "NVML_FI_DEV_MEMORY_TEMP", 82)),
            "sm_mhz": get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
            "mem_mhz": get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
            "power_w": round(power / 1000, 1) if power is not None else None,
            "util": util.gpu if util is not None else None, "reasons": get(reasons_fn)}


def main(argv):
    seconds, n, interval = float(argv[1]), int(argv[2]), float(argv[3])
    backend = argv[4] if len(argv) > 4 else "cuda"
    out = {"backend": backend, "n": n, "seconds_asked": seconds, "interval_s": interval,
           "dtype": "float16" if backend == "cuda" else "float32"}
    nvml = _nvml() if backend == "cuda" else "cpu backend: no NVML"
    if isinstance(nvml, str):
        out["nvml_error"] = nvml
    if len(argv) > 5:
        world = int(argv[5])
    elif not isinstance(nvml, str):
        world = nvml.nvmlDeviceGetCount()
    else:
        out["error"] = f"cannot count GPUs through NVML: {nvml}"
        return out
    if not isinstance(nvml, str):
        nvml.nvmlShutdown()  # again after the fork: the workers start with nothing of the parent's NVML
    out["world"] = world
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's device i is NVML's GPU i (this process only)
    ctx = mp.get_context("fork")
    queue, progress = ctx.Queue(), ctx.Array("d", world, lock=False)
    barrier = ctx.Barrier(world + 1)
    procs = [ctx.Process(target=_worker, args=(r, backend, n, seconds, progress, barrier, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    if not isinstance(nvml, str):
        nvml.nvmlInit()
    replies, samples = {}, []
    flops = 2 * n ** 3
    try:
        barrier.wait(timeout=600)
    except threading.BrokenBarrierError:
        pass
    started = time.monotonic()
    last_t, last_done = started, [0.0] * world
    deadline = started + seconds + 300
    next_sample = started + interval
    while len(replies) < world and time.monotonic() < deadline:
        try:
            rank, reply = queue.get(timeout=max(0.05, min(1.0, next_sample - time.monotonic())))
            replies[rank] = reply
        except Empty:
            if any(p.exitcode not in (None, 0) for r, p in enumerate(procs) if r not in replies):
                break
        now = time.monotonic()
        # while the GPUs work (not after: a sample of GPUs cooling down says nothing of the load)
        if now >= next_sample and not barrier.broken and now - started <= seconds + interval / 2:
            done = list(progress)
            gpus = []
            for r in range(world):
                row = _read(nvml, r) if not isinstance(nvml, str) else {"index": r}
                row["tflops"] = round(flops * (done[r] - last_done[r]) / (now - last_t) / 1e12, 2)
                gpus.append(row)
            samples.append({"t": round(now - started, 1), "gpus": gpus})
            last_t, last_done = now, done
            while next_sample <= now:  # a late sample (a busy machine) is not followed by catch-up ones
                next_sample += interval
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    out["samples"] = samples
    out["gpus"] = []
    for r in range(world):
        if r in replies:
            out["gpus"].append({"index": r, **replies[r]})
        else:
            out["gpus"].append({"index": r, "error": f"no answer within {seconds + 300:.0f} s (exit code "
                                f"{procs[r].exitcode}): a hung or lost GPU"})
    if not isinstance(nvml, str):
        nvml.nvmlShutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv)))
