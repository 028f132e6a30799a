"""An image built for a newer CUDA than the nodes' driver supports, replaced by one that fits.

The driver's CUDA version is what PyTorch reports ("driver ... too old (found version 12020)")
or nvidia-smi's header ("CUDA Version: 12.2"); an image's CUDA is its tag's cuXYZ / cudaX.Y.
The replacement is an image of the same repository that is known to run here: the job's own
last good run's, or one the namespace's running jobs use, built for a CUDA the driver supports.
"""

from __future__ import annotations

import re
from typing import Any

from crashcart.agent.policies.config_keys import load_key_table
from crashcart.agent.policies.evidence import Evidence
from crashcart.agent.policies.matching import _config_value

_FOUND = re.compile(r"driver on your system is too old \(found version (?P<v>\d{4,5})\)", re.I)
_SMI = re.compile(r"CUDA Version:\s*(?P<major>\d+)\.(?P<minor>\d+)")
_TAG_CUDA = re.compile(r"(?:\bcu|cuda-?)(?P<major>1\d)\.?(?P<minor>\d)(?:\.\d+)?(?!\d)", re.I)


def _image(config: dict[str, Any]) -> str | None:
    for key in load_key_table().settings["container_image"].keys:
        value = _config_value(config, key.key)
        if isinstance(value, str) and value:
            return value
    return None


def image_cuda(image: str) -> tuple[int, int] | None:
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    m = _TAG_CUDA.search(tag)
    return (int(m["major"]), int(m["minor"])) if m else None


def driver_cuda(ev: Evidence, job: str) -> tuple[int, int] | None:
    """The CUDA version the job's nodes' driver supports, as the job's log or nvidia-smi says."""
    for doc in ev.docs:
        for line in doc.lines:
            if doc.entity == f"job:{job}" and (m := _FOUND.search(line)):
                v = int(m["v"])
                return v // 1000, (v % 1000) // 10
    nodes = set(ev.jobs[job].nodes) if job in ev.jobs else set()
    for doc in ev.docs:
        if doc.entity[5:] in nodes:
            for line in doc.lines:
                if m := _SMI.search(line):
                    return int(m["major"]), int(m["minor"])
    return None


def image_the_driver_supports(ev: Evidence, job: str, captures: dict[str, str], margin: float | None) -> Any:
    """The same repository's image from the job's last good run, else the one image the running
    jobs of its namespace use, when the driver supports its CUDA and not the current one's."""
    current = _image(ev.configs.get(job, {}))
    driver = driver_cuda(ev, job)
    wanted = image_cuda(current) if current else None
    if not current or not driver or not wanted or wanted <= driver:
        return None
    repository = current.rsplit(":", 1)[0]

    def fits(image: str | None) -> bool:
        cuda = image_cuda(image) if image else None
        return bool(image) and image.rsplit(":", 1)[0] == repository and cuda is not None and cuda <= driver

    for run in ev.earlier_good_runs(job):
        if fits(image := _image(ev.configs.get(run, {}))):
            return image
    peers = {image for j in ev.running_peers() if fits(image := _image(ev.configs.get(j, {})))}
    return peers.pop() if len(peers) == 1 else None
