"""Every SGLang name the speculation hooks wrap exists in the installed SGLang; a moved one is reported clearly."""

import pytest

pytestmark = pytest.mark.sglang


def test_hook_targets_resolve(monkeypatch):
    monkeypatch.setenv("SGLANG_USE_CPU_ENGINE", "1")
    from moe_sglang import spec_hooks

    targets = [
        *spec_hooks.STEP_TARGETS,
        *spec_hooks.SAMPLE_TARGETS,
        *spec_hooks.DRAFT_TARGETS,
        spec_hooks.TARGET_FORWARD,
        *spec_hooks.TOPK_TARGETS,
    ]
    spec_hooks._check_targets(targets)
    from moe_sglang.compat import SGLangCompatError

    with pytest.raises(SGLangCompatError, match="TopK.gone"):
        spec_hooks._check_targets(["sglang.srt.layers.moe.topk.TopK.gone"])
