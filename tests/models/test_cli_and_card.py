import pytest

from service.cli import build_parser
from service.models.card import separation_sentence


@pytest.mark.parametrize(
    "argv,command",
    [
        (["model", "corpus", "--seed", "3"], "corpus"),
        (["model", "train", "--arch", "dense", "--steps", "5"], "train"),
        (["model", "inflate", "--out", "x", "--intermediate-size", "2048"], "inflate"),
        (["model", "draft"], "draft"),
        (["model", "stats"], "stats"),
        (["model", "eval", "--prompts", "2"], "eval"),
        (["model", "card"], "card"),
    ],
)
def test_model_subcommands_parse(argv, command):
    args = build_parser().parse_args(argv)
    assert args.model_command == command


def test_inflate_requires_a_size():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["model", "inflate", "--out", "x"])


@pytest.mark.parametrize(
    "accept,verdict,first",
    [
        ({"python": 0.40, "prose": 0.28, "arithmetic": 0.24}, "clear", "python"),
        ({"python": 0.30, "prose": 0.29, "arithmetic": 0.27}, "weak", "python"),
        ({"python": 0.10, "prose": 0.30, "arithmetic": 0.20}, "clear", "prose"),
    ],
)
def test_separation_sentence(accept, verdict, first):
    sentence = separation_sentence(accept)
    assert f"**{verdict}**" in sentence
    assert sentence.startswith(f"Accept-rate order: {first}")
