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


def test_train_shape_flags_override_the_spec_and_round_trip_through_the_card():
    from service.models.card import shape_flags
    from service.models.cli import _with_shape
    from service.models.train import MoESpec

    argv = ["model", "train", "--experts", "32", "--top-k", "4", "--intermediate-size", "96"]
    spec = _with_shape(MoESpec(), build_parser().parse_args(argv))
    assert (spec.num_experts, spec.top_k, spec.intermediate_size, spec.hidden_size) == (32, 4, 96, 256)
    config = spec.to_config(8192, 0).to_dict()
    assert shape_flags(config) == " --experts 32 --top-k 4 --intermediate-size 96"
    assert shape_flags(MoESpec().to_config(8192, 0).to_dict()) == ""
    with pytest.raises(SystemExit):
        _with_shape(MoESpec(), build_parser().parse_args(["model", "train", "--arch", "dense", "--experts", "4"]))


@pytest.mark.parametrize("hidden,intermediate,group", [(256, 512, 128), (256, 96, 32), (256, 64, 64)])
def test_int4_group_size_fits_the_expert_widths(tmp_path, hidden, intermediate, group):
    import json

    from service.models.draft import int4_group_size

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": hidden, "intermediate_size": intermediate}))
    assert int4_group_size(tmp_path) == group
