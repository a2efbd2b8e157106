"""Lossless sampled verification for speculative decoding on CPU.

SGLang 0.5.23 verifies every speculative step greedily on CPU (`eagle_utils._verify_uses_greedy` is true when
`is_cpu`), because the tree rejection-sampling kernel and the top-k/top-p renormalisation kernels exist only for
CUDA/MUSA (their names are None on CPU). A sampled request with NGRAM or STANDALONE speculation would then come
out greedy: not the distribution the user asked for. We supply torch versions of those three functions and take
`is_cpu` out of the greedy predicate. We do not flip `eagle_utils._is_cpu` itself: the same flag selects the
QLEN_ONLY tree-mask layout that the CPU attention backend needs.
"""

from __future__ import annotations


def verify_uses_greedy(
    *, is_all_greedy: bool, is_cpu: bool, is_hip: bool, is_xpu: bool, use_rejection_sampling: bool
) -> bool:
    """SGLang's predicate without the CPU clause (the CPU now has a sampling verify path)."""
    del is_cpu
    return is_all_greedy or is_xpu or (is_hip and not use_rejection_sampling)


def install() -> list[str]:
    """Patch sglang.srt.speculative.eagle_utils in this process; returns the names set."""
    from sglang.srt.speculative import eagle_utils

    from moe_sglang.touchpoints import hook
    from service.kernels.rejection_sampling import tree_speculative_sampling_target_only
    from service.kernels.renorm import top_k_renorm_prob, top_p_renorm_prob

    hook("sglang.srt.speculative.eagle_utils._verify_uses_greedy", verify_uses_greedy, "replace")
    # These three are None on CPU (no kernel); HookRegistry wraps callables only, so they are set directly.
    missing = {
        "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only,
        "top_k_renorm_prob": top_k_renorm_prob,
        "top_p_renorm_prob": top_p_renorm_prob,
    }
    installed = []
    for name, fn in missing.items():
        if getattr(eagle_utils, name) is None:
            setattr(eagle_utils, name, fn)
            installed.append(name)
    return installed
