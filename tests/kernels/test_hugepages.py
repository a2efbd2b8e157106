"""Weights on transparent huge pages (service/kernels/hugepages.py): ranges, the kernel's mode, and advise() leaving
the tensors' addresses and contents as they were whether or not the kernel gives huge pages."""

from __future__ import annotations

import pytest
import torch

from service.kernels import hugepages
from service.kernels.hugepages import HUGE, advise, ranges, thp_mode

MIB = 1 << 20


def test_ranges_keep_whole_aligned_pages_of_merged_spans():
    # two spans touching at 5 MiB merge into [1.5, 9.5) MiB, whose whole 2 MiB pages are [2, 8)
    spans = [(int(1.5 * MIB), int(3.5 * MIB)), (5 * MIB, int(4.5 * MIB))]
    assert ranges(spans) == [(2 * MIB, 6 * MIB)]
    # overlapping views of one storage count once; a span holding no whole page gives nothing
    assert ranges([(4 * MIB, 4 * MIB), (5 * MIB, MIB), (int(12.5 * MIB), MIB)]) == [(4 * MIB, 4 * MIB)]
    assert ranges([(3 * MIB, 0)]) == []
    # disjoint spans stay apart
    assert ranges([(0, 2 * MIB), (10 * MIB, 2 * MIB)]) == [(0, 2 * MIB), (10 * MIB, 2 * MIB)]


@pytest.mark.parametrize(
    ("text", "mode"),
    [("always [madvise] never\n", "madvise"), ("[always] madvise never", "always"), ("always madvise [never]", "never")],
)
def test_thp_mode_reads_the_bracketed_word(tmp_path, text, mode):
    setting = tmp_path / "enabled"
    setting.write_text(text)
    assert thp_mode(setting) == mode
    assert thp_mode(tmp_path / "absent") == ""


def test_never_or_absent_thp_asks_nothing_and_says_why(monkeypatch):
    weight = torch.randn(4 * MIB // 4)
    for mode in ("never", ""):
        monkeypatch.setattr(hugepages, "thp_mode", lambda mode=mode: mode)
        done = advise([weight])
        assert done.huge_after == done.huge_before and done.seconds == 0.0
        assert "transparent huge pages" in done.why and done.tensor_bytes == weight.nbytes


def test_advise_keeps_addresses_and_contents():
    torch.manual_seed(0)
    weight = torch.randn(3, 8 * MIB // 4)  # 24 MiB: at least 11 whole 2 MiB pages wherever it starts
    view = weight[1]  # a view of the same storage: counted once
    expected, address = weight.clone(), weight.data_ptr()
    done = advise([weight, view, torch.zeros(3)])
    assert weight.data_ptr() == address and torch.equal(weight, expected)
    assert done.tensor_bytes == weight.nbytes + 3 * 4
    assert 11 * HUGE <= done.range_bytes <= weight.nbytes
    if hugepages._unavailable():
        assert done.why == hugepages._unavailable() and done.huge_after == done.huge_before
    elif not done.why:  # the kernel collapsed every range: this process holds at least that much more in huge pages
        assert done.huge_after - done.huge_before >= done.range_bytes
    else:  # refused (an older kernel without MADV_COLLAPSE, no memory to compact): said, per advice
        assert "MADV_" in done.why
    assert "MiB of weights asked for" in done.describe()
