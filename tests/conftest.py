"""Test-session wiring shared by every test package.

Markers: `sglang` tests need the real SGLang engine (installed by scripts/setup.sh); `gpu` tests need CUDA and are
skipped where there is none. Hypothesis draws the same examples on every run (`derandomize`): a property test that
found a new failing case on a CI run would otherwise fail one submission and pass the next.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.engine import HAVE_SGLANG, EnginePool
from tests.moe_sglang.tiny_models import ARCHS, make_checkpoint

settings.register_profile("deterministic", derandomize=True)
settings.load_profile("deterministic")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    skip_sglang = pytest.mark.skip(reason="SGLang is not installed (run scripts/setup.sh)")
    has_cuda = _has_cuda()
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)
        if "sglang" in item.keywords and not HAVE_SGLANG:
            item.add_marker(skip_sglang)


@pytest.fixture(scope="session")
def engine_pool(tmp_path_factory) -> Iterator[EnginePool]:
    pool = EnginePool(tmp_path_factory.mktemp("engine-logs"))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Random checkpoints: one per architecture; an echo Mixtral (drafts get accepted, see make_checkpoint) as the
    speculation target and its own good draft, its weights bfloat16 values (the engine keeps its experts as bfloat16,
    as it does a bfloat16 checkpoint's); a Mixtral with other weights as a poor draft; an echo Llama as a dense
    draft (the one moe_sglang/draft_forward.py runs without SGLang's runner)."""
    root = tmp_path_factory.mktemp("tiny-models")
    models = {arch: make_checkpoint(root / arch, arch) for arch in ARCHS}
    models["mixtral-echo"] = make_checkpoint(root / "mixtral-echo", "mixtral", echo=8.0, bf16_values=True)
    models["mixtral-other"] = make_checkpoint(root / "mixtral-other", "mixtral", seed=1)
    models["llama-echo"] = make_checkpoint(root / "llama-echo", "llama", echo=8.0)
    return models
