"""The reliability suite reports its counts (kills, fuzz cases, leaks) at the end of every run,
captured output or not, so a CI log shows them."""

from __future__ import annotations

import procs


def pytest_terminal_summary(terminalreporter):
    if procs.REPORT:
        terminalreporter.section("reliability counts")
        for line in procs.REPORT:
            terminalreporter.write_line(line)
