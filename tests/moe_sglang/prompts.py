"""Token-id prompts for engine tests. 'Repetitive' prompts and long generations let n-gram/self drafts be accepted
(tiny random models fall into cycles that the drafters pick up); 'random' prompts with short outputs get rejections."""

import random

REPETITIVE = [[5, 6, 7, 8, 9, 10] * 4, [40, 41, 42] * 6, list(range(100, 120)) * 2]


def random_prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, vocab) for _ in range(length)] for _ in range(count)]
