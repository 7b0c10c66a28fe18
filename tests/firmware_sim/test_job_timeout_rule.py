"""The job-timeout rule (spec.regs.job_timeout_ms): one function the driver and the chip share."""
import pytest

from npu_hw import regs


@pytest.mark.parametrize("requested, default, cap, expected", [
    (0, 0, None, regs.DEFAULT_JOB_TIMEOUT_MS),   # nobody says: the chip's own default
    (0, 700, None, 700),                          # the device's WATCHDOG_MS
    (250, 700, None, 250),                        # the submitter's, even above no cap
    (9000, 700, None, 9000),                      # a ring entry: the KMD capped it already
    (0, 700, 400, 400),                           # the default is clamped too
    (250, 700, 400, 250),
    (9000, 700, 400, 400),                        # a queue entry above the queue's cap
    (9000, 700, 0, 700),                          # a cap of 0 is the default
    (9000, 0, 0, regs.DEFAULT_JOB_TIMEOUT_MS),
])
def test_a_job_timeout_is_the_submitters_else_the_default_clamped_by_the_cap(requested, default, cap, expected):
    assert regs.job_timeout_ms(requested, default, cap) == expected
