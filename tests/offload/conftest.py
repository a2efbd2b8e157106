from __future__ import annotations

import pytest
import torch

from service.offload.expert_file import ExpertFile, write_expert_file


@pytest.fixture(autouse=True)
def _one_thread():
    # The box is shared (2 cores): one intra-op thread keeps these tests fast and their timing honest.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def small_layers() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """3 layers x 4 experts of tiny weights (I=2, H=4): enough for store and eviction logic."""
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 4, 4, generator=gen), torch.randn(4, 4, 2, generator=gen)) for _ in range(3)]


@pytest.fixture
def small_file(tmp_path, small_layers) -> ExpertFile:
    source = ExpertFile(write_expert_file(small_layers, tmp_path / "experts.safetensors"))
    yield source
    source.close()
