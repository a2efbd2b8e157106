import re

import pytest

from service.models.arithmetic import arithmetic_documents

STEP = re.compile(r"^(-?\d+) ([+\-*]) (-?\d+) = (-?\d+)$")


def test_same_seed_same_documents_and_different_seed_differs():
    assert arithmetic_documents(3, 5000) == arithmetic_documents(3, 5000)
    assert arithmetic_documents(3, 5000) != arithmetic_documents(4, 5000)


def test_every_worked_step_is_correct():
    steps = 0
    for doc in arithmetic_documents(1, 20000):
        for line in doc.splitlines():
            match = STEP.match(line)
            if match:
                a, op, b, c = match.groups()
                assert eval(f"{a} {op} {b}") == int(c), line  # noqa: S307 - digits and one operator only
                steps += 1
    assert steps > 100


def test_chain_answer_is_last_step_result():
    for doc in arithmetic_documents(2, 20000):
        lines = doc.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("Answer: "):
                assert STEP.match(lines[i - 1]).group(4) == line.removeprefix("Answer: ")


def test_size_must_be_positive():
    with pytest.raises(ValueError):
        arithmetic_documents(0, 0)
