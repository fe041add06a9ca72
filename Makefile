# The two commands of the README. Each sets up what it needs (scripts/setup.sh) first.
.PHONY: demo test

demo:
	./scripts/setup.sh
	.venv/bin/python -m ctransformer.demo

test:
	./scripts/setup.sh test
	.venv/bin/python -m pytest tests -q
