"""`MOE_SERVE_STANDALONE`: SGLang's STANDALONE draft model (loaded and sized by SGLang's worker) with moe-serve's
per-request step.

    prefill   the target's prefill only: the draft model catches up lazily, when the request first drafts
    open      hints and views of the batch (step.py)
    plan      the policies' K_i, before drafting (what a draft costs depends on K here, unlike NGRAM's lookup), and
              the requests at K = 0 whose draft model a policy wants judged without a verify (draft_model.py)
    draft     the draft model, only over requests with K_i > 0, to depth min(K_i, num_steps) (draft_model.py)
    target    every K_i = 0: a plain decode forward; otherwise a ragged verify of request i's first
              min(K_i, D_i) + 1 nodes and SGLang's acceptance (verify.py)
    close     StepStats (draft_steps = the sequential draft forwards, which grow with the largest K) to the policies

Between steps the batch carries SGLang's NGRAM result container (accepted tokens per request, what the scheduler
filters and merges); the draft model's per-request state lives in the drafter (`seen`), keyed by request id.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from moe_sglang import plugin
from moe_sglang.accept import step_result
from moe_sglang.draft_forward import DirectDraft
from moe_sglang.draft_judge import judge_later
from moe_sglang.draft_model import DraftModelDrafter, SelectedLogits
from moe_sglang.draft_thread import Beside
from moe_sglang.plain_burst import burst_len
from moe_sglang.settings import EngineSettings
from moe_sglang.step import SpecRuntime, model_shape
from moe_sglang.verify import plain_step, verify_step
from service.kernels.small_gemm import MAX_ROWS
from service.models.accept_head import AcceptHead

logger = logging.getLogger(__name__)


def worker_class():
    from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2

    class MoeServeStandaloneWorker(StandaloneWorkerV2):
        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            super().__init__(server_args, gpu_id, nccl_port, target_worker)
            self.settings = EngineSettings.from_env()
            self.spec_runtime = SpecRuntime(
                self.settings, model_shape(target_worker.model_config), request_stats=plugin.STATE.request_stats
            )
            self.beside = Beside.for_setting(self.settings.draft_thread)  # draft forwards beside the target's
            self._draft_path = server_args.speculative_draft_model_path  # its acceptance head's place (_accept_head)
            self.drafter = DraftModelDrafter(
                self._draft_worker.draft_worker,
                self.topk,
                self.speculative_num_steps,
                self.speculative_num_draft_tokens,
                rows_selected=SelectedLogits.install(self._draft_worker.draft_runner.model),
            )

        def init_attention_backends(self):
            super().init_attention_backends()
            _ragged_draft_backend(self._draft_worker.draft_runner)
            # here, not in __init__: SGLang allocates the KV pools between the two (scheduler.init_model_worker)
            self.drafter.direct = _direct_draft(self.settings, self._draft_worker.draft_runner)
            self.drafter.head = _accept_head(self._draft_path, self.drafter.direct)
            if self.drafter.direct is not None and self.beside.threaded:
                logger.info("draft model: prompt catch-ups and judgements on a thread beside the target's forwards")

        def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
            if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
                return _prefill(self, batch, on_publish)
            if not batch.reqs:
                return super().forward_batch_generation(batch, on_publish, grammar_barrier, pp_proxy_tensors)
            return _decode(self, batch, on_publish)

    return MoeServeStandaloneWorker


def _accept_head(draft_path: str, direct: DirectDraft | None) -> AcceptHead | None:
    """The draft's acceptance head (service/models/accept_head.py) where its checkpoint has one and the direct forward
    (which hands the head its hidden states) runs; the engine log says which stop the draft's chains get."""
    head = AcceptHead.load(Path(draft_path)) if direct is not None else None
    if head is not None and head.hidden_size != direct.norm.numel():
        raise ValueError(f"{draft_path}: an acceptance head of hidden size {head.hidden_size}, the draft's differs")
    logger.info(
        "draft model: chains stop by %s", "its acceptance head where asked" if head else "the top-2 margin where asked"
    )
    return head


def _direct_draft(settings: EngineSettings, draft_runner) -> DirectDraft | None:
    """The draft model's direct forward (draft_forward.py) where the settings ask for it and it reproduces the model;
    the engine log says which forward the draft runs and, where not the direct one, why."""
    if settings.draft_forward == "sglang":
        return None
    direct, why = DirectDraft.of(draft_runner, ops=settings.draft_forward == "direct")
    if direct is None:
        logger.info("draft model: SGLang's runner (%s)", why)
    else:
        logger.info(
            "draft model: direct forward over its KV pool (%d layers; chain attention by %s; MLP and LM head "
            "weights %s)", len(direct.layers), "the C++ op" if direct.attention_op else "torch ops",
            "float32" if direct.narrow is None else f"bfloat16 up to {MAX_ROWS} rows",
        )  # fmt: skip
    return direct


def _ragged_draft_backend(draft_runner) -> None:
    """The draft model's forwards here are ragged TARGET_VERIFY forwards: on CPU its attention backend must read the
    RaggedVerifyLayout (SGLang builds the draft's backend directly, not through the backend registry)."""
    from moe_sglang.cpu_attention import backend_class
    from moe_sglang.plugin import cpu_engine

    if cpu_engine():
        draft_runner.attn_backend = backend_class()(draft_runner)


def _prefill(worker, batch, on_publish):
    """The target's prefill, the draft model's catch-up over the prompts beside it where a core is spare
    (DraftModelDrafter.prefill_later); the result in the NGRAM shape (one token per request, rows of n)."""
    worker.drafter.reset([req.rid for req in batch.reqs])
    # not for a request whose hints keep it at K = 0: it will never draft nor be judged (speculation off costs nothing)
    drafts = [worker.spec_runtime.may_draft(req) for req in batch.reqs]
    caught_up = worker.drafter.prefill_later(batch, worker.beside, drafts)
    try:
        result = worker.target_worker.forward_batch_generation(batch)
    finally:
        caught_up()  # joined before the prefill returns (draft_thread.py)
    bs, n = len(batch.reqs), worker.speculative_num_draft_tokens
    rows = torch.zeros(bs, n, dtype=torch.int32, device=batch.device)
    rows[:, 0] = result.next_token_ids
    out = step_result(
        result.logits_output,
        rows.reshape(-1),
        torch.ones(bs, dtype=torch.int32, device=batch.device),
        batch.seq_lens,  # spec v2: after an extend, seq_lens count the prompt; the sampled token is the next root
        result.can_run_cuda_graph,
        n,
        n,
    )
    out.next_token_ids = result.next_token_ids
    if on_publish is not None:
        on_publish(out.new_seq_lens)
    return out


def _decode(worker, batch, on_publish):
    runtime = worker.spec_runtime
    step = runtime.open(
        batch.reqs, max_k=worker.speculative_num_draft_tokens - 1, backlogs=worker.drafter.backlogs(batch)
    )
    threaded = worker.drafter.direct is not None and worker.beside.threaded  # judgements beside the forward
    plan = runtime.plan(step, judging=True, beside=threaded, gated=worker.drafter.gated)
    judged = _judge(worker.drafter, batch, step, plan.judge, worker.beside, plan.accept_stop)
    drafting, out = [], None
    try:
        if max(plan.ks) == 0:
            out = plain_step(worker, batch, step, burst_len(worker, batch, step))
            accept_lens = [1] * len(batch.reqs)
        else:
            start = time.perf_counter()
            trees, drafting, forwards = worker.drafter.draft(
                batch, list(plan.ks), list(plan.draft_stop), list(plan.accept_stop)
            )
            step.draft_steps += forwards
            step.draft_backlog_tokens += sum(step.views[r.row].draft_backlog for r in drafting)
            step.draft_s += time.perf_counter() - start
            runtime.count_draft()
            accept_lens = [min(k, d) + 1 for k, d in zip(plan.ks, trees.drafts, strict=True)]
            out = verify_step(worker, batch, step, trees, accept_lens)
    finally:
        shadow = judged(out)  # joined before the step returns (draft_thread.py)
    accepted = out.accepted()
    worker.drafter.accepted(batch, drafting, accepted)
    if on_publish is not None:
        on_publish(out.result.new_seq_lens)
    runtime.close(step, [n - 1 for n in accept_lens], accepted, shadow)
    for sub in out.following:  # a plain burst's later forwards (plain_burst.py)
        runtime.close(sub, [0] * len(accepted), accepted)
    return out.result


def _judge(drafter: DraftModelDrafter, batch, step, judge: tuple[bool, ...], beside: Beside, accept_stops=()):
    """The draft model judged without a verify for the requests the plan names (draft_judge.py): one
    draft forward over what their draft cache lacks, run by `beside` (draft_thread.py) while the step drafts for
    the others and runs the target's forward; the returned join gives the shadow outcomes. Timed and counted apart
    from drafting (StepStats.judge_s): a judgement is one forward over a context (~130 rows at a first judgement on
    the bench's prompts where the prompt was not caught up at its prefill, the draft forward's long path), a draft
    step one over a few rows, and counted as one draft step with its catch-up the judgements taught the policy's fit
    a draft step ~3x its cost (3.5 ms against ~1 ms measured per chain step on the CPU engine, moe-fine's dense
    draft), which then priced every speculative step out at batch 1. What is timed is what the step waited for:
    the whole forward on the scheduler's thread, on a thread of its own the time its join waited. The join takes
    the step's output (None where the step failed): each judged request's root is judged against the first token
    its row emitted (draft_judge.py, judging the root); `accept_stops`: StepPlan.accept_stop (judging gated
    chains)."""
    rows = [i for i, asked in enumerate(judge) if asked]
    if not rows:
        return lambda out: ()
    forward_s = []  # the judging forward's own seconds, wherever it ran

    def timed(fn):
        def run():
            at = time.perf_counter()
            try:
                return fn()
            finally:
                forward_s.append(time.perf_counter() - at)

        return beside(run)

    start = time.perf_counter()
    later = judge_later(drafter, batch, rows, timed, list(accept_stops))  # chains gated as verified ones
    waited = time.perf_counter() - start if not beside.threaded else 0.0

    def join(out):
        at = time.perf_counter()
        now = None if out is None else out.result.next_token_ids.view(len(judge), -1)[:, 0].tolist()
        shadow, ran = later(now)
        if shadow:  # outcomes came back (none only where the step failed with nothing emitted since the last one)
            step.judge_s += waited + (time.perf_counter() - at)
            step.judge_tokens += ran
            if beside.threaded:
                step.judge_beside_s += sum(forward_s)
        return shadow

    return join
