"""A plain decode step reported in the speculative worker's shape: what SGLang's result processing reads of it."""

from types import SimpleNamespace

import torch

from moe_sglang.accept import StepOutput
from moe_sglang.plain_decode import PlainDecode


def test_plain_step_output_is_a_verify_step_that_accepted_nothing():
    bs, stride = 3, 4
    batch = SimpleNamespace(reqs=[object()] * bs, device="cpu", seq_lens=torch.tensor([5, 9, 2]))
    plain = PlainDecode(torch.tensor([11, 22, 33]), None, False, batch.seq_lens + 1)
    out = StepOutput.plain(batch, plain, [plain.next_tokens], stride, stride)
    result = out.result
    # SGLang reads next_token_ids[i * stride : i * stride + accept_lens[i]] (batch_result_processor.py)
    assert result.accept_lens.tolist() == [1, 1, 1] and result.accept_lens.dtype == torch.int32
    assert [result.next_token_ids[i * stride].item() for i in range(bs)] == [11, 22, 33]
    assert result.next_token_ids.numel() == bs * stride and result.next_token_ids.dtype == torch.int32
    assert result.new_seq_lens.tolist() == [6, 10, 3]
    assert result.next_draft_input.accept_tokens is result.next_token_ids
    assert out.accepted() == [0, 0, 0]
    assert batch.seq_lens.tolist() == [5, 9, 2]  # the batch is not changed
    assert result.num_non_draft_tokens_per_req == 1


def test_a_plain_burst_is_one_accepted_run_of_tokens_none_of_them_drafts():
    bs, stride = 2, 4
    batch = SimpleNamespace(reqs=[object()] * bs, device="cpu", seq_lens=torch.tensor([5, 9]))
    tokens = [torch.tensor([11, 21]), torch.tensor([12, 22]), torch.tensor([13, 23])]
    plain = PlainDecode(tokens[-1], None, False, batch.seq_lens + 3)  # the burst's last forward
    out = StepOutput.plain(batch, plain, tokens, stride, stride)
    result = out.result
    assert result.accept_lens.tolist() == [3, 3]
    rows = result.next_token_ids.tolist()
    assert [rows[i * stride : i * stride + 3] for i in range(bs)] == [[11, 12, 13], [21, 22, 23]]
    assert result.new_seq_lens.tolist() == [8, 12]
    # SGLang counts accepted drafts as accept_len - num_non_draft_tokens_per_req: none here
    assert result.num_non_draft_tokens_per_req == 3
    assert out.accepted() == [0, 0]
