"""Generated arithmetic text with worked steps: the "math" domain of the embedded model's corpus (issue 3).

Each document is a problem followed by one line per intermediate result and an `Answer:` line, so the model
sees the same step format everywhere; the content is what prompt lookup cannot copy from the prompt, which is
why arithmetic is expected to draft worst of the three domains.
"""

from __future__ import annotations

import random

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo", "Kofi", "Lena")
_ITEMS = ("apples", "books", "coins", "stamps", "marbles", "pencils", "cards", "shells")
_OPS = ("+", "-", "*")


def _apply(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    return a * b


def _sum_problem(rng: random.Random) -> str:
    digits = rng.choice((1, 2, 3, 4))
    a, b = rng.randrange(10**digits), rng.randrange(10**digits)
    op = rng.choice(_OPS)
    if op == "*":
        a, b = rng.randrange(100), rng.randrange(20)
    return f"{a} {op} {b} = {_apply(a, op, b)}\n"


def _chain_problem(rng: random.Random) -> str:
    terms = [rng.randrange(1, 50) for _ in range(rng.randint(3, 5))]
    ops = [rng.choice(_OPS[:2]) if i % 2 else rng.choice(_OPS) for i in range(len(terms) - 1)]
    # Left-to-right with explicit parentheses so every step is a single binary operation.
    expr = str(terms[0])
    for i, (op, term) in enumerate(zip(ops, terms[1:], strict=True)):
        expr = f"({expr}) {op} {term}" if i else f"{expr} {op} {term}"
    lines = [f"Compute {expr}."]
    value = terms[0]
    for op, term in zip(ops, terms[1:], strict=True):
        result = _apply(value, op, term)
        lines.append(f"{value} {op} {term} = {result}")
        value = result
    lines.append(f"Answer: {value}")
    return "\n".join(lines) + "\n"


def _word_problem(rng: random.Random) -> str:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    have, more, boxes = rng.randrange(2, 60), rng.randrange(2, 40), rng.randrange(2, 9)
    kind = rng.randrange(3)
    if kind == 0:
        question = f"{name} has {have} {item} and gets {more} more. How many {item} does {name} have now?"
        steps = [f"{have} + {more} = {have + more}"]
        answer = have + more
    elif kind == 1:
        give = rng.randrange(1, have + 1)
        question = f"{name} has {have} {item} and gives away {give}. How many {item} are left?"
        steps = [f"{have} - {give} = {have - give}"]
        answer = have - give
    else:
        question = f"{name} buys {boxes} boxes of {more} {item} and already has {have}. How many {item} in total?"
        steps = [f"{boxes} * {more} = {boxes * more}", f"{boxes * more} + {have} = {boxes * more + have}"]
        answer = boxes * more + have
    return "\n".join([question, *steps, f"Answer: {answer}"]) + "\n"


def arithmetic_documents(seed: int, total_chars: int) -> list[str]:
    """Documents of about `total_chars` characters in all, identical for the same seed."""
    if total_chars <= 0:
        raise ValueError(f"total_chars must be positive, got {total_chars}")
    rng = random.Random(seed)
    makers = (_sum_problem, _chain_problem, _word_problem)
    docs: list[str] = []
    size = 0
    while size < total_chars:
        # A document groups a few problems of mixed kinds, like a worksheet.
        doc = "\n".join(rng.choice(makers)(rng) for _ in range(rng.randint(4, 12)))
        docs.append(doc)
        size += len(doc)
    return docs
