"""GPU telemetry: nvidia-smi's CSV query output, throttle reasons, and a DCGM-style table."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from crashcart.tools.cluster import GpuSample
from crashcart.tools.render._formats import iso_z, table

_THROTTLE_BITS = {
    "gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
    "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100,
}
_THROTTLE_COLUMNS = (
    "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
    "sw_thermal_slowdown", "sw_power_cap",
)
NVIDIA_SMI_QUERY = (
    "index,name,temperature.gpu,power.draw,clocks.sm,utilization.gpu,memory.used,memory.total,"
    "ecc.errors.uncorrected.volatile.total,remapped_rows.pending,clocks_throttle_reasons.active,"
    + ",".join(f"clocks_throttle_reasons.{c}" for c in _THROTTLE_COLUMNS)
)


def throttle_reason(name: str) -> str | None:
    """A scenario's throttle reason ("HW Slowdown", "sw_thermal") as nvidia-smi's field name."""
    key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    key = key.removeprefix("clocks_throttle_reasons_").removeprefix("clocks_event_reasons_")
    for candidate in (key, f"{key}_slowdown", f"{key}_setting"):
        if candidate in _THROTTLE_BITS:
            return candidate
    return None


def nvidia_smi_csv(samples: Iterable[GpuSample], gpu_model: str | None) -> list[str]:
    """`nvidia-smi --query-gpu=<NVIDIA_SMI_QUERY> --format=csv`, units in the header and the cells."""
    units = {"power.draw": " [W]", "clocks.sm": " [MHz]", "utilization.gpu": " [%]",
             "memory.used": " [MiB]", "memory.total": " [MiB]"}
    lines = [", ".join(f + units.get(f, "") for f in NVIDIA_SMI_QUERY.split(","))]

    def num(value: float | int | None, fmt: str, unit: str = "") -> str:
        return "[N/A]" if value is None else f"{value:{fmt}}{unit}"

    for s in samples:
        active = {r for r in map(throttle_reason, s.throttle_reasons) if r}
        mask = sum(_THROTTLE_BITS[r] for r in active)
        lines.append(", ".join([
            str(s.index), gpu_model or "[N/A]", num(s.temperature_c, ".0f"),
            num(s.power_w, ".2f", " W"), num(s.sm_clock_mhz, ".0f", " MHz"),
            num(s.util_pct, ".0f", " %"), num(s.memory_used_mib, ".0f", " MiB"),
            num(s.memory_total_mib, ".0f", " MiB"), num(s.ecc_uncorrected, "d"),
            num(s.remapped_rows_pending, "d"), f"0x{mask:016X}",
            *("Active" if c in active else "Not Active" for c in _THROTTLE_COLUMNS),
        ]))
    return lines


def xid_lines(samples: Iterable[GpuSample]) -> list[str]:
    """The exporter's last Xid per GPU, when the samples carry it (DCGM_FI_DEV_XID_ERRORS)."""
    reported = [s for s in samples if s.xid is not None]
    if not reported:
        return []
    raised = [s for s in reported if s.xid]
    if not raised:
        return ["Last Xid per GPU (DCGM_FI_DEV_XID_ERRORS): none reported"]
    return ["Last Xid per GPU (DCGM_FI_DEV_XID_ERRORS): " + ", ".join(f"GPU {s.index}: Xid {s.xid}" for s in raised)]


def gpu_metrics_table(samples: Iterable[GpuSample], now: datetime) -> list[str]:
    """GPU samples over time, one row each, in DCGM field terms."""
    rows = [
        [iso_z(s.time or now), s.index,
         *("-" if v is None else f"{v:g}" for v in (
             s.temperature_c, s.power_w, s.sm_clock_mhz, s.util_pct, s.memory_used_mib,
             s.ecc_uncorrected, s.remapped_rows_pending)),
         ",".join(s.throttle_reasons) or "-"]
        for s in samples
    ]
    header = ["TIME", "GPU", "GPU_TEMP", "POWER_USAGE", "SM_CLOCK", "GPU_UTIL", "FB_USED",
              "ECC_DBE_VOL", "ROW_REMAP_PENDING", "CLOCK_THROTTLE_REASONS"]
    return table(header, rows)
