"""The copy bandwidth the step profile's floors divide by: measured at a given thread count, the process's restored."""

import torch

from bench.verify_cost import memory_bandwidth


def test_bandwidth_at_a_thread_count_restores_the_process_threads():
    before = torch.get_num_threads()
    one = memory_bandwidth(8, repeats=2, threads=1)
    assert torch.get_num_threads() == before
    assert 1e8 < one < 1e13  # bytes per second: a real copy, neither zero nor instantaneous
