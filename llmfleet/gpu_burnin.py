"""The GPU burn-in, judged: what llmfleet/remote/gpu_burnin.py reports (results, and NVML's readings
during the run) against a GPU profile and the burn-in settings. Pure: no I/O.

A GPU fails the burn-in with: an error or no answer, a wrong element in any product (or a known
result that the CPU did not confirm), a mean below gpu_burnin_min_tflops_fraction x the profile's
fp16_tensor_tflops, a temperature above gpu_burnin_max_temperature_c in any sample, or a failing
clock event reason in any sample (FAILING_REASONS). The software power cap (0x4) is what a GPU at
full load shows: it is recorded and counted, not failed; the TFLOP/s floor catches a card it holds
back too far.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmfleet.schema import GpuProfile

# NVML's clock event reasons (nvml.h nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*), the
# bitmask nvmlDeviceGetCurrentClocksEventReasons returns (templates/monitoring/gpu-alerts.yml.j2 pages on
# the same bits)
REASONS = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
}
# a card that shows one of these under load is overheating, or its board or power supply holds it
# back: it fails acceptance (HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80)
FAILING_REASONS = 0x8 | 0x20 | 0x40 | 0x80


def reason_names(mask: int | None) -> list[str]:
    if not mask:
        return []
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return names + ([f"0x{rest:x}"] if rest else [])


@dataclass(frozen=True)
class Limits:
    min_tflops: float | None  # None: the profile has no fp16_tensor_tflops
    max_temperature_c: int

    @classmethod
    def of(cls, profile: GpuProfile, fraction: float, max_temperature_c: int) -> Limits:
        peak = profile.fp16_tensor_tflops
        return cls(round(peak * fraction, 1) if peak else None, max_temperature_c)


def summary(result: dict) -> dict[int, dict]:
    """Per GPU: TFLOP/s, products, wrong elements, and over the samples: the highest GPU and memory
    temperature, the SM clock's lowest and highest, the highest power, each clock event reason with the
    samples that showed it."""
    out: dict[int, dict] = {}
    for g in result.get("gpus", []):
        i = g["index"]
        rows = [row for s in result.get("samples", []) for row in s["gpus"] if row["index"] == i]

        def values(key: str, rows: list[dict] = rows) -> list:
            return [r[key] for r in rows if isinstance(r.get(key), int | float)]

        seen: dict[str, int] = {}
        for r in rows:
            for name in reason_names(r.get("reasons")):
                seen[name] = seen.get(name, 0) + 1
        sm = values("sm_mhz")
        out[i] = {"name": g.get("name"), "error": g.get("error"), "tflops": g.get("tflops"),
                  "products": g.get("products"), "wrong_elements": g.get("wrong_elements"),
                  "known_result": g.get("known_result"), "samples": len(rows),
                  "max_temp_c": max(values("temp_c"), default=None),
                  "max_mem_temp_c": max(values("mem_temp_c"), default=None),
                  "sm_mhz": [min(sm), max(sm)] if sm else None,
                  "max_power_w": max(values("power_w"), default=None), "reasons": seen,
                  "failing_reasons": sorted({n for r in rows for n in reason_names((r.get("reasons") or 0)
                                                                                   & FAILING_REASONS)})}
    return out


def problems(result: dict, limits: Limits, count: int) -> list[str]:
    """Every way the burn-in failed, per GPU: `GPU i: what: expected X, actual Y`."""
    if result.get("error"):
        return [f"burn-in: expected to run, actual: {result['error']}"]
    out = []
    gpus = summary(result)
    if len(gpus) != count:
        out.append(f"burn-in: GPUs loaded: expected {count}, actual {len(gpus)}")
    for i, s in sorted(gpus.items()):
        if s["error"]:
            out.append(f"GPU {i}: burn-in: expected to run, actual: {s['error']}")
            continue
        if s["known_result"] is False:
            out.append(f"GPU {i}: burn-in known result (FP32 product against the CPU's): expected equal, actual "
                       "different (the GPU computes wrong)")
        if s["wrong_elements"]:
            out.append(f"GPU {i}: burn-in wrong elements in {s['products']} products: expected 0, actual "
                       f"{s['wrong_elements']} (a hardware error)")
        if limits.min_tflops is not None and (s["tflops"] or 0) < limits.min_tflops:
            out.append(f"GPU {i}: burn-in FP16 TFLOP/s: expected at least {limits.min_tflops:g}, actual "
                       f"{s['tflops']:g} (max {s['max_temp_c']} C, SM {_span(s['sm_mhz'])} MHz, "
                       f"clock event reasons: {_seen(s['reasons'])})")
        if s["max_temp_c"] is not None and s["max_temp_c"] > limits.max_temperature_c:
            out.append(f"GPU {i}: burn-in temperature: expected at most {limits.max_temperature_c} C, actual "
                       f"{s['max_temp_c']} C")
        if s["failing_reasons"]:
            out.append(f"GPU {i}: burn-in clock event reasons: expected none of thermal, HW slowdown or power "
                       f"brake, actual {_seen({n: s['reasons'][n] for n in s['failing_reasons']})} of "
                       f"{s['samples']} samples")
    return out


def _span(span: list | None) -> str:
    return "?" if not span else f"{span[0]}" if span[0] == span[1] else f"{span[0]}-{span[1]}"


def _seen(reasons: dict[str, int]) -> str:
    return ", ".join(f"{n} (x{k})" for n, k in reasons.items()) or "none"


def describe(result: dict, limits: Limits | None = None) -> str:
    """What an operator reads: the samples over the run (per GPU: TFLOP/s in the interval, temperatures,
    clocks, power, reasons), then a line per GPU with the whole run's figures."""
    lines = [f"burn-in: {result.get('world')} GPU(s), {result.get('dtype')} {result.get('n')}^3 products, "
             f"{result.get('seconds_asked'):g} s, NVML every {result.get('interval_s'):g} s"]
    lines.append(f"{'t s':>6} {'GPU':>3} {'TFLOP/s':>8} {'temp C':>6} {'mem C':>5} {'SM MHz':>6} {'mem MHz':>7} "
                 f"{'W':>6} {'util':>4}  clock event reasons")
    for s in result.get("samples", []):
        for r in s["gpus"]:
            lines.append(f"{s['t']:>6} {r['index']:>3} {r.get('tflops', 0):>8.1f} {_v(r.get('temp_c')):>6} "
                         f"{_v(r.get('mem_temp_c')):>5} {_v(r.get('sm_mhz')):>6} {_v(r.get('mem_mhz')):>7} "
                         f"{_v(r.get('power_w')):>6} {_v(r.get('util')):>4}  "
                         f"{', '.join(reason_names(r.get('reasons'))) or '-'}")
    for i, s in sorted(summary(result).items()):
        if s["error"]:
            lines.append(f"GPU {i}: {s['error']}")
            continue
        floor = f" (at least {limits.min_tflops:g})" if limits and limits.min_tflops is not None else ""
        known = "confirmed" if s["known_result"] else "WRONG"
        lines.append(f"GPU {i} {s['name']}: {s['tflops']} TFLOP/s{floor}, {s['products']} products, "
                     f"{s['wrong_elements']} wrong elements, known result {known}, "
                     f"max {_v(s['max_temp_c'])} C (memory {_v(s['max_mem_temp_c'])} C), SM {_span(s['sm_mhz'])} "
                     f"MHz, max {_v(s['max_power_w'])} W, clock event reasons: {_seen(s['reasons'])}")
    return "\n".join(lines)


def _v(x: object) -> str:
    return "-" if x is None else str(x)
