"""A plain decode step reported in the speculative worker's shape: what SGLang's result processing reads of it."""

from types import SimpleNamespace

import torch

from moe_sglang.accept import StepOutput
from moe_sglang.plain_decode import PlainDecode


def test_plain_step_output_is_a_verify_step_that_accepted_nothing():
    bs, stride = 3, 4
    batch = SimpleNamespace(reqs=[object()] * bs, device="cpu", seq_lens=torch.tensor([5, 9, 2]))
    plain = PlainDecode(torch.tensor([11, 22, 33]), None, False, batch.seq_lens + 1)
    out = StepOutput.plain(batch, plain, stride, stride)
    result = out.result
    # SGLang reads next_token_ids[i * stride : i * stride + accept_lens[i]] (batch_result_processor.py)
    assert result.accept_lens.tolist() == [1, 1, 1] and result.accept_lens.dtype == torch.int32
    assert [result.next_token_ids[i * stride].item() for i in range(bs)] == [11, 22, 33]
    assert result.next_token_ids.numel() == bs * stride and result.next_token_ids.dtype == torch.int32
    assert result.new_seq_lens.tolist() == [6, 10, 3]
    assert result.next_draft_input.accept_tokens is result.next_token_ids
    assert out.accepted() == [0, 0, 0]
    assert batch.seq_lens.tolist() == [5, 9, 2]  # the batch is not changed
