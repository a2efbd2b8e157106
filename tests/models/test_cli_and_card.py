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


def test_init_takes_the_checkpoints_shape():
    from service.models.cli import run

    argv = ["model", "train", "--arch", "dense", "--init", "x", "--tiny"]
    with pytest.raises(SystemExit, match="--init takes its shape"):
        run(build_parser().parse_args(argv))


def test_distilled_draft_card_gives_both_runs_and_how_to_reproduce_them(tmp_path):
    import json

    from transformers import LlamaForCausalLM

    from service.models.draft_card import render_draft_card

    from .conftest import tiny_llama_config

    draft = tmp_path / "moe-x-draft"
    LlamaForCausalLM(tiny_llama_config()).save_pretrained(str(draft))
    tc = {"batch_size": 8, "seq_len": 256, "lr": 0.003, "seed": 0, "threads": 1, "warmup": 15, "max_minutes": 20.0}
    first = {
        "steps": 220,
        "planned_steps": 220,
        "tokens": 450560,
        "wall_s": 510.0,
        "train_config": {**tc, "steps": 220},
    }
    second_tc = {**tc, "steps": 400, "lr": 0.001, "seed": 1, "warmup": 10, "max_minutes": 0.0}
    summary = {"steps": 400, "planned_steps": 400, "tokens": 819200, "wall_s": 420.0, "train_config": second_tc}
    summary |= {"init": "FIRST", "distilled_from": "assets/moe-x", "init_summary": first}
    (draft / "training_summary.json").write_text(json.dumps(summary))
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_log.jsonl").write_text(json.dumps({"step": 400, "kl": 0.1234}) + "\n")
    card = render_draft_card(draft, run, None)
    assert "220 steps (planned 220) x 8 x 256 = 450,560 tokens in 8.5 min" in card
    assert "Then distilled from `../moe-x/`" in card and "400 steps (planned 400)" in card and "KL 0.123" in card
    assert "moe-serve model corpus --tokenizer assets/moe-x\n" in card
    assert (
        "--steps 220 --batch-size 8 --warmup 15 --lr 0.003 --seed 0 --threads 1 --max-minutes 20 --export FIRST" in card
    )
    assert "train --arch dense --init FIRST --distill-from assets/moe-x --steps 400 --batch-size 8 --warmup 10" in card
    assert "train --arch dense --hidden-size 16 --layers 1" in card  # the first run's shape; --init takes none


def test_a_draft_trained_further_without_a_teacher_is_not_called_distilled(tmp_path):
    import json

    from transformers import LlamaForCausalLM

    from service.models.draft_card import render_draft_card

    from .conftest import tiny_llama_config

    draft = tmp_path / "moe-x-draft"
    LlamaForCausalLM(tiny_llama_config()).save_pretrained(str(draft))
    tc = {"batch_size": 8, "seq_len": 256, "lr": 0.003, "seed": 0, "threads": 1, "warmup": 15, "max_minutes": 0.0}
    first = {"steps": 10, "planned_steps": 10, "tokens": 20480, "wall_s": 6.0, "train_config": {**tc, "steps": 10}}
    summary = {**first, "init": "FIRST", "distilled_from": None, "init_summary": first}
    (draft / "training_summary.json").write_text(json.dumps(summary))
    card = render_draft_card(draft, tmp_path / "no-run", None)
    assert "Then trained further on the corpus" in card and "distill" not in card
    assert "moe-serve model corpus\n" in card and " --init FIRST --steps 10" in card
    (draft / "training_summary.json").write_text(json.dumps({**summary, "distilled_from": "T", "init_summary": None}))
    with pytest.raises(ValueError, match="init_summary"):
        render_draft_card(draft, tmp_path / "no-run", None)
