"""Slurm's limits as `sacctmgr show qos/assoc -P` and `sshare -a -P` print them."""

from __future__ import annotations

from crashcart.tools._spec import ToolError
from crashcart.tools.cluster import Association, FairShareRow, JobPriority, Qos
from crashcart.tools.render.scheduler import (
    SACCTMGR_ASSOC_FIELDS, SACCTMGR_QOS_FIELDS, SPRIO_FIELDS, SPRIO_FORMAT, SSHARE_FIELDS,
)

QOS_ARGV = ["sacctmgr", "-P", "show", "qos", "format=" + ",".join(SACCTMGR_QOS_FIELDS)]
ASSOC_ARGV = ["sacctmgr", "-P", "show", "assoc", "format=" + ",".join(SACCTMGR_ASSOC_FIELDS)]
SPRIO_ARGV = ["sprio", "-o", SPRIO_FORMAT]
SSHARE_ARGV = ["sshare", "-a", "-P", "-o", ",".join(SSHARE_FIELDS)]


def _records(command: str, text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    if lines[0].split("|") != list(fields):
        raise ToolError(f"{command} printed an unexpected header (expected {'|'.join(fields)}): {lines[0][:300]!r}")
    out = []
    for line in lines[1:]:
        cells = line.split("|")
        if len(cells) != len(fields):
            raise ToolError(f"{command} printed a line crashcart cannot read (expected {len(fields)} "
                            f"'|'-separated fields, got {len(cells)}): {line[:300]!r}")
        out.append(dict(zip(fields, cells)))
    return out


def _number(command: str, cell: str, kind: type) -> float | int:
    try:
        return kind(cell) if cell.strip() else kind(0)
    except ValueError:
        raise ToolError(f"{command} printed {cell!r} where a number belongs") from None


def qos_rows(text: str) -> list[Qos]:
    return [Qos(name=r["Name"], priority=int(_number("sacctmgr", r["Priority"], int)),
                grp_tres=r["GrpTRES"] or None, max_tres_pu=r["MaxTRESPU"] or None, max_wall=r["MaxWall"] or None)
            for r in _records("sacctmgr show qos", text, SACCTMGR_QOS_FIELDS)]


def assoc_rows(text: str) -> list[Association]:
    return [Association(account=r["Account"], user=r["User"] or None, partition=r["Partition"] or None,
                        share=r["Share"] or "1", grp_tres=r["GrpTRES"] or None,
                        qos=[q for q in r["QOS"].split(",") if q])
            for r in _records("sacctmgr show assoc", text, SACCTMGR_ASSOC_FIELDS)]


def sshare_rows(text: str) -> list[FairShareRow]:
    rows = []
    for r in _records("sshare", text, SSHARE_FIELDS):
        # sshare indents an account by its depth in the tree; the name is what follows.
        rows.append(FairShareRow(
            account=r["Account"].strip(), user=r["User"] or None, raw_shares=r["RawShares"] or "",
            norm_shares=_number("sshare", r["NormShares"], float), raw_usage=int(_number("sshare", r["RawUsage"], int)),
            effectv_usage=_number("sshare", r["EffectvUsage"], float), fairshare=_number("sshare", r["FairShare"], float),
        ))
    return rows


def sprio_rows(text: str) -> list[JobPriority]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    if lines[0].split("|") != list(SPRIO_FIELDS):
        raise ToolError(f"sprio printed an unexpected header (expected {'|'.join(SPRIO_FIELDS)}): {lines[0][:300]!r}")
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != len(SPRIO_FIELDS):
            raise ToolError(f"sprio printed a line crashcart cannot read (expected {len(SPRIO_FIELDS)} "
                            f"'|'-separated fields, got {len(cells)}): {line[:300]!r}")
        n = [int(_number("sprio", c, int)) for c in cells[3:]]
        rows.append(JobPriority(job=cells[0], partition=cells[1] or None, user=cells[2] or None, priority=n[0],
                                age=n[1], fairshare=n[2], jobsize=n[3], partition_factor=n[4], qos=n[5]))
    return rows

