"""GPU telemetry from NVIDIA's DCGM exporter, read through the API server's pod proxy.

The exporter (a DaemonSet the GPU operator installs, `app=nvidia-dcgm-exporter`, port 9400)
prints each GPU's fields in the Prometheus text format, one sample per line, labelled with
the GPU's index, UUID, model and the node's name:

    DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-...",device="nvidia3",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-a01",...} 84

crashcart GETs /api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics for the exporter pod on the
node (RBAC: get pods/proxy), so it needs no route into the pod network. The exporter keeps no
history: this is one sample per GPU, now. Fields the exporter is not configured to collect
stay unknown (None), never zero.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from crashcart.tools.cluster import GpuSample

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

# DCGM field -> GpuSample field, in nvidia-smi's units (DCGM's are the same: C, W, MHz, %, MiB).
_FIELDS = {
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_uncorrected",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remapped_rows_pending",
}
_INTEGER = {"ecc_uncorrected", "remapped_rows_pending"}
_THROTTLE = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
_THROTTLE_NAMES = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
XID = "DCGM_FI_DEV_XID_ERRORS"


class MetricsError(ValueError):
    pass


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) of every sample line; comments and blank lines skipped."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise MetricsError(f"line {n} is not in the Prometheus text format: {line[:120]!r}")
        try:
            value = float(m["value"])
        except ValueError:
            raise MetricsError(f"line {n}: {m['value']!r} is not a number") from None
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m["labels"] or "")}
        out.append((m["name"], labels, value))
    return out


def gpu_samples(text: str, node: str, now: datetime) -> tuple[list[GpuSample], str | None]:
    """Per-GPU samples of `node` (the exporter's Hostname label, when it has one), each with the
    last Xid its GPU reported (DCGM_FI_DEV_XID_ERRORS, 0 = none), and the GPU model."""
    per_gpu: dict[int, dict[str, Any]] = {}
    model = None
    free: dict[int, float] = {}
    for name, labels, value in samples(text):
        if "gpu" not in labels or not labels["gpu"].isdigit():
            continue
        if labels.get("Hostname") not in (None, "", node):
            continue  # an exporter that serves several nodes' GPUs (a standalone DCGM host engine)
        index = int(labels["gpu"])
        fields = per_gpu.setdefault(index, {})
        model = model or labels.get("modelName")
        if name in _FIELDS:
            key = _FIELDS[name]
            fields[key] = int(value) if key in _INTEGER else value
        elif name in ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"):
            free[index] = free.get(index, 0.0) + value  # nvidia-smi's memory.total counts the reserved MiB
        elif name in _THROTTLE:
            mask = int(value)
            fields["throttle_reasons"] = [n for bit, n in _THROTTLE_NAMES.items() if mask & bit and bit != 0x1]
        elif name == XID:
            fields["xid"] = int(value)
    for index, fields in per_gpu.items():
        if "memory_used_mib" in fields and index in free:
            fields["memory_total_mib"] = fields["memory_used_mib"] + free[index]
    return [GpuSample(index=i, time=now, **per_gpu[i]) for i in sorted(per_gpu)], model
