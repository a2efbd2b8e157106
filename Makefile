# The two commands of the README.
.PHONY: setup run test lint

setup:
	./scripts/setup.sh

run: setup
	.venv/bin/moe-serve up

test: setup
	./scripts/test-tools.sh
	.venv/bin/python -m pytest -q

lint:
	.venv/bin/ruff check .
