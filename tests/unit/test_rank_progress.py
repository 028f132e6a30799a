"""Ranks out of step when a log stops: a hang told by comparing ranks' own counters."""

from crashcart.agent.rank_progress import ranks_out_of_step
from crashcart.agent.verdict import diagnose_text

# srun --label prefixes, a Megatron-style iteration line; rank 3 stopped three iterations behind.
LABELLED = "\n".join(
    f"{r}: [2025-06-02 04:1{i}:0{r}] iteration {n:>6}/ 100000 | consumed samples: {n * 512} | lm loss: 2.41"
    for i, n in enumerate(range(1200, 1206)) for r in range(4) if not (r == 3 and n > 1202)
)

# mpirun --tag-output prefixes, in step: rank 1 one line behind rank 0, as interleaving leaves it.
IN_STEP = "\n".join(
    f"[1,{r}]<stdout>: epoch 2 step {n} loss 0.81" for n in range(40, 46) for r in range(2) if not (r == 1 and n == 45)
)


def test_ranks_left_apart_when_the_log_stops_are_a_hang():
    last, evidence = ranks_out_of_step(LABELLED.splitlines())
    assert last == {0: 1205, 1: 1205, 2: 1205, 3: 1202}
    assert evidence[0].startswith("3: ")
    v = diagnose_text(LABELLED)
    assert (v.family, v.diagnosis, v.remedy) == ("stuck", "ranks_out_of_step", "escalate_user")
    assert v.confidence < 0.5


def test_ranks_one_increment_apart_are_interleaving_not_a_hang():
    assert ranks_out_of_step(IN_STEP.splitlines()) is None
    assert diagnose_text(IN_STEP).diagnosis != "ranks_out_of_step"


def test_a_run_that_ends_after_the_gap_is_not_hung():
    assert ranks_out_of_step((LABELLED + "\n0: [after 1205 iterations] training completed, exiting").splitlines()) is None


def test_a_rank_that_logs_every_tenth_step_is_not_behind():
    lines = [f"[rank0]: step {n} loss 1.0" for n in range(100, 130)]
    lines += [f"[rank1]: step {n} loss 1.0" for n in range(100, 130, 10)]
    assert ranks_out_of_step(lines) is None
    # ...while the same two ranks, both logging every step, nine apart are.
    assert ranks_out_of_step(lines[:30] + [f"[rank1]: step {n} loss 1.0" for n in range(100, 121)]) is not None


def test_one_ranks_counter_alone_says_nothing():
    assert ranks_out_of_step([f"[rank0]: step {n}" for n in range(10)]) is None


def test_a_counter_that_goes_back_is_a_restart_not_a_gap():
    lines = [f"[rank{r}]: step {n}" for n in (5, 6, 7, 1, 2, 3) for r in (0, 1)] + ["[rank0]: step 4", "[rank0]: step 5"]
    assert ranks_out_of_step(lines) is None
