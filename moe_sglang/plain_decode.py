"""A plain decode forward inside a speculative worker: the step for a batch in which no request speculates.

SGLang 0.5.23 has none: its speculative workers verify at least the root token through the TARGET_VERIFY path with
its tree bookkeeping (NGRAM) or run a 1-token verify plus a draft extend (EAGLE with steps = 0). A plain decode is the
same computation as SGLang's non-speculative engine does: each request's last token (the bonus token of its previous
step, whose KV is not written yet) goes through the target at position seq_len, its K/V lands in the first slot the
scheduler reserved for this step (`req_to_token[req, seq_len]`), and the next token is sampled with the request's own
sampling parameters. The result is reported in the speculative worker's shape (one accepted token per request, rows
of `stride` tokens), so SGLang's result processing cannot tell it from a verify step that accepted nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PlainDecode:
    """What the plain forward produced."""

    next_tokens: torch.Tensor  # [bs] sampled tokens
    logits_output: object  # SGLang's LogitsProcessorOutput (logprobs in the speculative [bs, 1] shape)
    can_run_cuda_graph: bool
    new_seq_lens: torch.Tensor  # [bs] committed tokens after the step (the forward's seq_lens: nothing writes them)


def last_tokens(reqs, device) -> torch.Tensor:
    """[bs] each request's newest token: the root of this step (its KV is written by the coming forward)."""
    last = [req.output_ids[-1] if req.output_ids else req.origin_input_ids[-1] for req in reqs]
    return torch.tensor(last, dtype=torch.int64, device=device)


def run_plain_decode(target_worker, batch, roots: torch.Tensor, offset: int = 0) -> PlainDecode:
    """One DECODE forward + sampling over `batch` (a speculative decode batch, seq_lens = committed tokens).
    `offset`: tokens this step already decoded before this forward (a burst's later forwards, plain_burst.py): the
    roots sit at position seq_len + offset and their K/V go to the step's reserved slot of that index."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    bs = len(batch.reqs)
    # the slot the scheduler reserved for this token, [bs] int64 (one gather: no cache-location kernel needed)
    at = batch.seq_lens if offset == 0 else batch.seq_lens + offset
    loc = batch.req_to_token_pool.req_to_token[batch.req_pool_indices, at].to(torch.int64)
    saved = _DecodeView.enter(batch, roots, loc, offset)
    batch.forward_mode = ForwardMode.DECODE
    new_seq_lens = batch.seq_lens
    try:
        result = target_worker.forward_batch_generation(batch)
    finally:
        saved.exit(batch)
    logits = result.logits_output
    if batch.return_logprob and logits.next_token_logprobs is not None:
        logits.next_token_logprobs = logits.next_token_logprobs.reshape(bs, 1)  # spec result shape: [bs, accepted]
    return PlainDecode(result.next_token_ids, logits, result.can_run_cuda_graph, new_seq_lens)


@dataclass
class _DecodeView:
    """The batch fields a DECODE forward reads differently from a speculative step, saved to restore afterwards:
    in SGLang's plain decode, seq_lens already count the token being decoded."""

    fields: dict

    NAMES = ("forward_mode", "input_ids", "out_cache_loc", "seq_lens", "seq_lens_cpu", "seq_lens_sum", "spec_info")

    @classmethod
    def enter(cls, batch, roots: torch.Tensor, loc: torch.Tensor, offset: int = 0) -> _DecodeView:
        saved = cls({name: getattr(batch, name) for name in cls.NAMES})
        batch.input_ids = roots
        batch.out_cache_loc = loc
        batch.seq_lens = batch.seq_lens + (offset + 1)
        if batch.seq_lens_cpu is not None:
            batch.seq_lens_cpu = batch.seq_lens_cpu + (offset + 1)
        if batch.seq_lens_sum is not None:
            batch.seq_lens_sum = batch.seq_lens_sum + len(batch.reqs) * (offset + 1)
        batch.spec_info = None
        return saved

    def exit(self, batch) -> None:
        for name, value in self.fields.items():
            setattr(batch, name, value)
