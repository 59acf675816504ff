"""One definition of the lost/dropped counters (profiles/lost.py) for status, metrics and the window store."""

from __future__ import annotations

from deepctx.profiles.lost import lost_counters

STATS = {"cpu_user_stacks_lost": 3, "gpu_api_stacks_lost": 0, "python_stack_map_full": 2, "device_batches_cut": 1,
         "device_records_dropped_by_cupti": 5, "store_failed": 4, "table_rows_dropped": 9, "cpu_samples": 100,
         "trace_lost": True}


def test_lost_counters_name_every_lost_event_once() -> None:
    assert lost_counters(STATS) == {"cpu_user_stacks_lost": 3, "device_batches_cut": 1,
                                    "device_records_dropped_by_cupti": 5, "python_stack_map_full": 2}


def test_metrics_keep_a_series_for_counters_at_zero() -> None:
    assert lost_counters(STATS, zeros=True) == lost_counters(STATS) | {"gpu_api_stacks_lost": 0}
