import math

import numpy as np
import pytest
import torch

from service.models.evaluate import unigram_loss, windows


def test_windows_are_evenly_spaced_and_cover_both_ends():
    ids = np.arange(100, dtype=np.uint16)
    batch = windows(ids, 3, 10)
    assert batch[:, 0].tolist() == [0, 45, 90]
    assert batch[-1, -1].item() == 99
    with pytest.raises(ValueError):
        windows(ids[:5], 1, 10)


def test_unigram_loss_is_add_one_smoothed_cross_entropy():
    train = np.array([1, 1, 1, 2], dtype=np.uint16)  # with add-one over vocab 4: p = [1, 4, 2, 1] / 8
    batch = torch.tensor([[0, 1, 2]])  # scored targets: 1, 2
    expected = -(math.log(4 / 8) + math.log(2 / 8)) / 2
    assert unigram_loss(train, batch, vocab_size=4) == pytest.approx(expected)
