"""After the target forward: SGLang's acceptance on the dense [bs, n] draft layout, and the step's result in the shape
SGLang's scheduler expects of a speculative worker (rows of n tokens, `accept_lens`, the next step's input). Both our
workers hand the scheduler SGLang's NGRAM container between steps (accepted tokens per request: what it filters and
merges); the STANDALONE drafter keeps its own state by request id (draft_model.py).

Acceptance is SGLang's own (`eagle_sample`: greedy or, with our CPU kernels, sampled tree verification), then the KV
move of the accepted tokens and the logprobs, as NGRAMWorker.forward_batch_generation does after its verify forward
(SGLang 0.5.23). Every request's tree links beyond its L_i nodes are cut before this runs (ragged.py), so a request
accepts at most its K_i drafts and rows that were not verified are never read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from moe_sglang.settings import VERIFY_LAYOUTS


def forward_lens(accept_lens: list[int], stride: int, layout: str) -> list[int]:
    """Nodes per request in the verify forward of each layout (settings.VERIFY_LAYOUTS); `accept_lens` = L_i."""
    if layout == "ragged":
        return list(accept_lens)
    if layout == "rectangular":
        return [max(accept_lens)] * len(accept_lens)
    if layout == "fixed":
        return [stride] * len(accept_lens)
    raise ValueError(f"verify layout {layout!r}: expected one of {VERIFY_LAYOUTS}")


@dataclass
class StepOutput:
    result: object  # SGLang's GenerationBatchResult
    plain_rows: int = 0  # a plain decode step's batch size (nothing accepted: no host copy needed to say so)
    following: tuple = ()  # a plain burst's later forwards, each a StepInFlight to close after this step's

    def accepted(self) -> list[int]:
        """[bs] drafts each request accepted (the bonus token not counted)."""
        if self.plain_rows:
            return [0] * self.plain_rows
        return [int(a) - 1 for a in self.result.accept_lens.tolist()]

    @classmethod
    def plain(cls, batch, plain, tokens: list, stride: int, num_draft_tokens: int) -> StepOutput:
        """A plain decode step (plain_decode.py) reported as a verify step that accepted no draft: row i holds
        request i's token first; the scheduler reads no further than accept_lens (1). A burst's `tokens` (one [bs]
        tensor per forward, plain_burst.py) fill the row's first len(tokens) places, every one of them a token of
        no draft (`num_non_draft_tokens_per_req`: SGLang's acceptance counts stay those of drafts)."""
        bs, run = len(batch.reqs), len(tokens)
        accept_lens = torch.full((bs,), run, dtype=torch.int32, device=batch.device)
        rows = torch.zeros(bs, stride, dtype=torch.int32, device=batch.device)
        rows[:, :run] = torch.stack(tokens, dim=1)
        result = step_result(
            plain.logits_output,
            rows.reshape(-1),
            accept_lens,
            plain.new_seq_lens,
            plain.can_run_cuda_graph,
            stride,
            num_draft_tokens,
        )
        result.num_non_draft_tokens_per_req = run
        return cls(result, plain_rows=bs)


def accept_on_dense_rows(worker, batch, verify_input, logits_output, can_run_graph, grammar_host) -> StepOutput:
    """Acceptance, KV move and logprobs of an NGRAM verify; `batch` holds the dense inputs again (input_ids,
    out_cache_loc, spec_info = `verify_input`) and `logits_output` the dense [bs * n] logits."""
    from sglang.srt.layers.logprob_processor import compute_spec_logprobs
    from sglang.srt.speculative.ngram_worker import eagle_sample
    from sglang.srt.speculative.spec_utils import move_accept_tokens_to_target_kvcache

    n = verify_input.draft_token_num
    grammar_mask = _grammar_mask(batch, verify_input, grammar_host, n) if grammar_host is not None else None
    watermark = worker.target_worker.model_runner.watermark_state
    predict, accept_lens, accept_index = eagle_sample(
        verify_input, batch, logits_output, grammar_mask, watermark_state=watermark
    )
    accept_tokens = predict[accept_index]  # [bs, n]; entries past accept_lens are never read
    if watermark is not None and batch.sampling_info.has_watermark_candidates:
        watermark.append_speculative(batch.req_pool_indices, accept_tokens, accept_lens)
    # on a GPU the check would cost a host sync to save a few kernel launches: moved as SGLang does
    window = batch.out_cache_loc.numel() // len(batch.reqs)
    if accept_index.device.type != "cpu" or not kv_in_place(accept_index, accept_lens, window):
        move_accept_tokens_to_target_kvcache(batch, accept_index, accept_lens - 1, worker.token_to_kv_pool_allocator)
    if batch.return_logprob:
        compute_spec_logprobs(batch, logits_output, predict, accept_index=accept_index)
    return StepOutput(
        step_result(
            logits_output,
            accept_tokens.flatten(),
            accept_lens,
            batch.seq_lens + accept_lens,
            can_run_graph,
            n,
            worker.speculative_num_draft_tokens,
        )
    )


def kv_in_place(accept_index: torch.Tensor, accept_lens: torch.Tensor, window: int) -> bool:
    """Whether every request's accepted tokens (the bonus included) are the head of its verify window, in order: then
    their KV already lies where SGLang's move puts it (the first accept_lens[i] slots of request i's window of
    `window` slots) and the move would copy each slot onto itself (entries past accept_lens[i] are -1, as
    eagle_sample leaves them). A chain's accepted drafts always are (a draft of one token per depth: the STANDALONE
    and NGRAM engines of the benchmarks); the move took ~0.45 ms of a 24-27 ms batch-1 STANDALONE step on moe-fine
    x48 (py-spy, AVX2 EPYC: three index fills and a copy per layer of K and V)."""
    bs, width = accept_index.shape
    cols = torch.arange(width, device=accept_index.device)
    head = torch.arange(bs, device=accept_index.device).unsqueeze(1) * window + cols
    accepted = cols < accept_lens.unsqueeze(1)
    return bool((accept_index == torch.where(accepted, head, -1)).all())  # past accept_lens: -1 (nothing to move)


def step_result(logits_output, rows, accept_lens, new_seq_lens, can_run_graph, stride, num_draft_tokens):
    """SGLang's GenerationBatchResult of a decode step: `rows` [bs * stride] accepted tokens per request."""
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from sglang.srt.speculative.ngram_info import NgramVerifyInput

    next_draft_input = NgramVerifyInput(
        draft_token_num=stride, new_seq_lens=new_seq_lens, accept_tokens=rows, accept_lens=accept_lens
    )
    return GenerationBatchResult(
        logits_output=logits_output,
        next_token_ids=rows,
        can_run_cuda_graph=can_run_graph,
        accept_lens=accept_lens,
        new_seq_lens=new_seq_lens,
        next_draft_input=next_draft_input,
        speculative_num_draft_tokens=num_draft_tokens,
    )


def _grammar_mask(batch, verify_input, grammar_host, n: int):
    """The grammar's vocabulary mask over the dense draft tree, from the host tree (as SGLang's NGRAM step does)."""
    from sglang.srt.speculative.ngram_worker import _derive_tree_links
    from sglang.srt.speculative.spec_utils import GrammarTree, build_grammar_vocab_mask

    mask, tokens = grammar_host
    bs = len(batch.reqs)
    next_token, next_sibling = _derive_tree_links(mask, bs, n)
    tree = GrammarTree.from_host(next_token, next_sibling, torch.from_numpy(tokens).to(torch.int64).view(bs, -1))
    return build_grammar_vocab_mask(
        reqs=batch.reqs,
        tree=tree,
        sampling_info=batch.sampling_info,
        device=verify_input.retrieve_next_token.device,
        barrier=None,
    )
