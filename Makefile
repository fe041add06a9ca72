# The README's two commands, plus a few conveniences. Each sets up what it needs first
# (scripts/setup.sh: Debian packages, .venv, pip install .).
.PHONY: train test sanitize demo bench notebooks

TASK ?= copy
ARGS ?=

# The main job: train one of the tasks end to end (copy, toy-translate, shakespeare, multi30k).
train:
	./scripts/setup.sh
	.venv/bin/python -m ctransformer.train $(TASK) $(ARGS)

# The whole test suite, against PyTorch 2.13.
test:
	./scripts/setup.sh test
	.venv/bin/python -m pytest tests -q

# The core rebuilt under AddressSanitizer+UBSan and ThreadSanitizer, running part of the suite;
# any report fails (scripts/sanitize.sh; README, "Sanitizers").
sanitize:
	./scripts/setup.sh test
	./scripts/sanitize.sh all

# A ten-second first look: a tiny model trained from Python with plain gradient descent.
demo:
	./scripts/setup.sh
	.venv/bin/python -m ctransformer.demo

# ctransformer against PyTorch on this machine, in one run.
bench:
	./scripts/setup.sh test
	.venv/bin/python benchmarks/run.py $(ARGS)
