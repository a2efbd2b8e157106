"""`moe-serve` command line: one subcommand per component, each defined next to the code it runs.

A component's CLI module exposes `add_arguments(parser)` and `run(args) -> int`; it must stay cheap to import
(no torch, no sglang at module level) so `moe-serve --help` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module with add_arguments/run, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "engine": ("moe_sglang.cli", "SGLang server on the embedded default (CPU) or a GPU, with the moe-serve plugin"),
    "replay": (
        "service.traces.cli",
        "replay a request trace (Mooncake, Azure, BurstGPT) and write a latency/goodput report",
    ),
    "up": ("service.up", "the embedded default: SGLang engine + gateway on one machine, OpenAI API on :8000"),
    "gateway": ("service.gateway.cli", "OpenAI-compatible multi-tenant gateway in front of SGLang servers"),
    "model": ("service.models.cli", "build, train and inspect the embedded MoE model and its drafts"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="moe-serve", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(command)
        command.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
