"""moe-serve's speculative algorithms, registered with SGLang (`SpeculativeAlgorithm.register`):

    MOE_SERVE_NGRAM        SGLang's NGRAM drafter, moe-serve's per-request step (ngram_worker.py)
    MOE_SERVE_STANDALONE   SGLang's STANDALONE draft model, moe-serve's per-request step (standalone_worker.py)

`moe-serve engine --speculative ngram|standalone` selects them (launch.py). Each is described to SGLang by a
`CustomSpecAlgo` subclass that answers SGLang's questions about the algorithm (`is_ngram()`, `has_draft_kv()`, ...)
exactly as the builtin it wraps does, because SGLang branches on those answers in its scheduler, memory sizing and
overlap code. It also provides the four methods SGLang 0.5.23 calls on every algorithm object that `CustomSpecAlgo`
lacks (`carries_draft_hidden_states`, `create_future_map`, `need_topk`, `get_platform_worker_cls`). What SGLang
still keys on the algorithm *name* (spec_utils.spec_need_hidden_states for "STANDALONE", the tokenizer manager's
external n-gram corpus endpoints for "NGRAM") is listed in touchpoints.py.

The steps are synchronous (`supports_overlap=False`): the policies plan each step from the previous step's accepted
tokens, which the overlap scheduler would only deliver one step late. SGLang logs that a custom algorithm without
overlap runs on its V2 scheduler schema synchronously; that is what we want. On CPU SGLang disables overlap for
speculation anyway.
"""

from __future__ import annotations

ALGORITHMS = {"ngram": "MOE_SERVE_NGRAM", "standalone": "MOE_SERVE_STANDALONE"}  # moe-serve flag -> SGLang name
_BUILTIN = {"MOE_SERVE_NGRAM": "NGRAM", "MOE_SERVE_STANDALONE": "STANDALONE"}
# Answered by CustomSpecAlgo itself (it is a speculative algorithm, not NONE), not by the wrapped builtin.
_OWN_ANSWERS = ("is_some", "is_none", "is_speculative")


def register() -> list[str]:
    """Register both algorithms in this process (SGLang's main and scheduler processes each load the plugin)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    registered = []
    for name, factory in (("MOE_SERVE_NGRAM", _ngram_worker), ("MOE_SERVE_STANDALONE", _standalone_worker)):
        if get_spec(name) is None:
            SpeculativeAlgorithm.register(name, supports_overlap=False, spec_class=_spec_class(name))(factory)
        registered.append(name)
    return registered


def _ngram_worker(server_args):
    from moe_sglang.ngram_worker import worker_class

    return worker_class()


def _standalone_worker(server_args):
    from moe_sglang.standalone_worker import worker_class

    return worker_class()


def _spec_class(name: str):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    builtin = SpeculativeAlgorithm[_BUILTIN[name]]
    questions = [q for q in vars(SpeculativeAlgorithm) if q.startswith(("is_", "supports_")) and q not in _OWN_ANSWERS]
    answers = {q: _same_answer(builtin, q) for q in questions}

    class MoeServeAlgo(CustomSpecAlgo):
        def has_draft_kv(self) -> bool:
            return builtin.has_draft_kv()

        def carries_draft_hidden_states(self) -> bool:
            return builtin.carries_draft_hidden_states()

        def need_topk(self) -> bool:
            return builtin.need_topk()

        def create_future_map(self, *args, **kwargs):
            return builtin.create_future_map(*args, **kwargs)

        def get_platform_worker_cls(self):
            return None  # our worker on every platform

        def get_num_tokens_per_req_for_target_verify(self, num_draft_tokens: int, is_draft_worker: bool) -> int:
            return builtin.get_num_tokens_per_req_for_target_verify(num_draft_tokens, is_draft_worker)

        def handle_server_args(self, server_args) -> None:
            _HANDLERS[builtin.name](server_args)

    for question, answer in answers.items():
        setattr(MoeServeAlgo, question, answer)
    MoeServeAlgo.__name__ = MoeServeAlgo.__qualname__ = f"{name.title().replace('_', '')}Algo"
    return MoeServeAlgo


def _same_answer(builtin, question: str):
    def answer(self) -> bool:
        return getattr(builtin, question)()

    answer.__name__ = question
    return answer


def _speculative_defaults(args, default_draft_tokens: int) -> None:
    """What SGLang's builtin handlers set for every speculative algorithm, written on SGLang's recording stand-in
    (a registered algorithm's handler gets one: its writes become declared resolutions)."""
    args.disable_overlap_schedule = True  # synchronous steps (module docstring)
    args.enable_mixed_chunk = False  # a mixed prefill+decode batch would bypass the per-request step
    if args.max_running_requests is None:
        args.max_running_requests = 48  # SGLang's default for speculative decoding
    if args.speculative_num_draft_tokens is None:
        args.speculative_num_draft_tokens = default_draft_tokens


def _handle_ngram(args) -> None:
    if args.device not in ("cuda", "cpu", "xpu"):
        raise ValueError("moe-serve's NGRAM speculation runs on CUDA, CPU or XPU devices")
    _speculative_defaults(args, default_draft_tokens=12)
    # SGLang's NGRAM drafts a BFS tree over its trie; the breadth is the tree's "topk"
    args.speculative_eagle_topk = args.speculative_ngram_max_bfs_breadth
    if args.speculative_num_steps is None:
        args.speculative_num_steps = args.speculative_num_draft_tokens // args.speculative_eagle_topk


def _handle_standalone(args) -> None:
    if args.speculative_draft_model_path is None:
        raise ValueError("moe-serve's STANDALONE speculation needs --speculative-draft-model-path")
    _speculative_defaults(args, default_draft_tokens=4)
    # SGLang's auto choice for STANDALONE (speculative_hook._auto_choose_speculative_params): 3 steps, topk 1
    if args.speculative_num_steps is None:
        args.speculative_num_steps = 3
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = 1


_HANDLERS = {"NGRAM": _handle_ngram, "STANDALONE": _handle_standalone}
