"""`df -hP` as nodes print it: the filesystems, their sizes and where they are mounted.

Shared by the fixture (which replays a node's recorded output) and the live backends (which run
the command), so both hand the policy the same rows.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

DF_COMMAND = "df -hP"
_HEADER = re.compile(r"^Filesystem\s+(Size|\d+[KMG]?-blocks)\s+Used\s+Avail", re.I)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


class Mount(BaseModel):
    filesystem: str
    size_bytes: float
    avail_bytes: float
    use_pct: int
    mounted_on: str


def human_bytes(text: str) -> float | None:
    """df -h's sizes ("3.5T", "512M", "0") in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)i?", text.strip(), re.I)
    return float(m[1]) * _UNITS[m[2].upper()] if m else None


def parse_df(text: str) -> list[Mount]:
    """Rows of `df -hP`; lines that are not rows (the header, a warning) are skipped."""
    mounts = []
    for line in text.splitlines():
        if not line.strip() or _HEADER.match(line):
            continue
        cols = line.split()
        if len(cols) < 6 or not cols[4].endswith("%"):
            continue
        size, avail = human_bytes(cols[1]), human_bytes(cols[3])
        if size is None or avail is None or not cols[4][:-1].isdigit():
            continue
        mounts.append(Mount(filesystem=cols[0], size_bytes=size, avail_bytes=avail,
                            use_pct=int(cols[4][:-1]), mounted_on=" ".join(cols[5:])))
    return mounts
