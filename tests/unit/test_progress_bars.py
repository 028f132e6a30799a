"""A trailing progress bar proves a job alive until its anchor plus the bar's elapsed time."""

from datetime import datetime, timedelta, timezone

from crashcart.agent.policies.progress_bars import bar_alive_until, trailing_bar_elapsed

T0 = datetime(2026, 5, 2, 8, 0, tzinfo=timezone.utc)

# HF Accelerate / plain tqdm, and a byte-unit bar (huggingface_hub uploads print this shape).
EVAL_LOG = [
    "2026-05-02 08:00:00,001 INFO starting predict",
    "Predicting:   0%|          | 0/900 [00:00<?, ?it/s]",
    "Predicting:  40%|████      | 360/900 [20:00<30:00,  0.30it/s]",
    "Predicting:  80%|████████  | 720/900 [40:00<10:00,  0.30it/s]",
]
UPLOAD_LOG = [
    "saving shard 3/3",
    "upload:  22%|██▏       | 1.10G/4.97G [01:50<06:27, 10.0MB/s]",
    "upload:  51%|█████     | 2.53G/4.97G [04:13<04:04, 10.0MB/s]",
]


def test_advancing_bar_moves_the_last_sign_of_life_forward():
    now = T0 + timedelta(minutes=42)
    assert bar_alive_until(EVAL_LOG, 0, [T0], now) == T0 + timedelta(minutes=40)


def test_byte_unit_bar_is_read_with_its_scale():
    assert trailing_bar_elapsed(UPLOAD_LOG) == timedelta(minutes=4, seconds=13)


def test_frozen_bar_proves_nothing():
    frozen = EVAL_LOG[:3] + ["Predicting:  40%|████      | 360/900 [20:00<30:00,  0.30it/s]"]
    assert trailing_bar_elapsed(frozen, 0) is None


def test_bar_followed_by_other_output_proves_nothing():
    assert trailing_bar_elapsed(EVAL_LOG + ["Traceback (most recent call last):"], 0) is None


def test_bar_before_the_last_stamped_line_is_not_read():
    log = EVAL_LOG[1:] + ["2026-05-02 08:45:00,000 INFO done"]
    assert trailing_bar_elapsed(log, len(log) - 1) is None


def test_anchor_the_bar_cannot_have_started_after_is_rejected():
    # The bar began before this anchor: anchor + elapsed lands an hour after now.
    now = T0 + timedelta(minutes=42)
    assert bar_alive_until(EVAL_LOG, None, [now + timedelta(minutes=30)], now) is None
    # With a valid anchor too, the latest one still inside now is used.
    assert bar_alive_until(EVAL_LOG, None, [T0, now + timedelta(minutes=30)], now) == T0 + timedelta(minutes=40)


def test_single_update_is_not_progress():
    assert trailing_bar_elapsed(EVAL_LOG[:1] + EVAL_LOG[2:3], 0) is None
