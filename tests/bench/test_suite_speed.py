"""How long the whole bundled suite takes (run with --benchmark-enable)."""

import pytest

from crashcart.evals.runner import run_suite


@pytest.mark.benchmark(group="eval")
def test_whole_bundled_suite(benchmark):
    report = benchmark.pedantic(run_suite, rounds=3, iterations=1, warmup_rounds=1)
    assert report.summary.total >= 60
    assert report.summary.errors == 0
