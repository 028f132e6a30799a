"""`crashcart diagnose` on a 100 MB log: seconds, not minutes (issue 8, item 8)."""

import json
import time

from typer.testing import CliRunner

from crashcart.agent.interfaces.cli import app

ENV = {"COLUMNS": "240", "NO_COLOR": "1", "TERM": "dumb"}
XID = "[1843.113] NVRM: Xid (PCI:0000:9b:00): 79, pid=41235, name=python, GPU has fallen off the bus.\n"
STEP = "2026-03-02 09:{m:02d}:{s:02d} | INFO | train | step {n} | loss 2.31 | 3512 tokens/s\n"


def test_diagnose_a_hundred_megabyte_log_in_seconds(tmp_path):
    path = tmp_path / "big.log"
    block = "".join(STEP.format(m=i // 60 % 60, s=i % 60, n=i) for i in range(10_000))
    with path.open("w") as f:
        for i in range(int(100e6 // len(block))):
            f.write(block)
            if i == 60:
                f.write(XID)
    started = time.monotonic()
    out = CliRunner().invoke(app, ["diagnose", "--json", str(path)], env=ENV)
    took = time.monotonic() - started
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["diagnosis"] == "gpu_fallen_off_bus"
    assert took < 30, f"{took:.1f} s for 100 MB"
