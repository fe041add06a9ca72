# The README's two commands, plus a few conveniences. Each sets up what it needs first
# (scripts/setup.sh: Debian packages, .venv, pip install .).
.PHONY: train test test-stress test-levels test-aarch64 sanitize demo bench notebooks docs docs-serve

TASK ?= copy
ARGS ?=
# The order make test runs the suite in: pytest-randomly shuffles it by this seed (printed first), so an order a
# test depends on shows, and replays with the same SEED. make test SEED=N tries another order.
SEED ?= 20261206

# The main job: train one of the tasks end to end (copy, toy-translate, shakespeare, multi30k).
train:
	./scripts/setup.sh
	.venv/bin/python -m ctransformer.train $(TASK) $(ARGS)

# The test targets compile through scripts/compiler_launcher.sh: ccache (~/.cache/ctransformer/ccache) when
# installed (setup.sh test installs it), so a fresh clone recompiles only what changed.
test test-stress test-levels test-aarch64 sanitize: export CMAKE_CXX_COMPILER_LAUNCHER = $(CURDIR)/scripts/compiler_launcher.sh

# The whole test suite, against PyTorch 2.13, in a shuffled order (SEED above).
test:
	./scripts/setup.sh test
	.venv/bin/python -m pytest tests -q --durations=20 -p randomly --randomly-seed=$(SEED)

# The tests of threads, the serving engine and the server (marked `threads`) three times on one busy core and once
# with more maths threads than cores (scripts/test_stress.sh); about 8 minutes.
test-stress:
	./scripts/setup.sh test
	./scripts/test_stress.sh

# What smaller CPUs run, proven on this one: the kernel-dependent tests again in a process capped at
# x86-64-v3 (AVX2, an AMD Zen 1) and at the baseline x86-64, each with the OpenBLAS core such a CPU picks
# (scripts/test_levels.sh; docs/install.md, "CPUs"). No build of its own: the package is one binary for every CPU.
test-levels:
	./scripts/setup.sh test
	./scripts/test_levels.sh

# The package cross-built for 64-bit ARM (build/aarch64) and tested under qemu-user as a Neoverse N1 and an
# SVE CPU: an arm64 Debian tree and aarch64 wheels (torch 2.10.0) cached in ~/.cache/ctransformer/aarch64
# (scripts/test_aarch64.sh; its header says which tests run and which not). About 9 min cold, 4 warm.
test-aarch64:
	./scripts/setup.sh test
	./scripts/test_aarch64.sh

# The core rebuilt under AddressSanitizer+UBSan and ThreadSanitizer, running part of the suite;
# any report fails (scripts/sanitize.sh; docs/proof.md, "Sanitizers").
sanitize:
	./scripts/setup.sh test
	./scripts/sanitize.sh all

# A ten-second first look: a Transformer trained to copy, and a picture of where it looks (ctransformer/demo.py).
demo:
	./scripts/setup.sh
	.venv/bin/python -m ctransformer.demo

# The guide and API reference as a site (mkdocs.yml): site/index.html. docs-serve: live at http://127.0.0.1:8000.
docs:
	./scripts/setup.sh test
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

docs-serve:
	./scripts/setup.sh test
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve

# ctransformer against PyTorch on this machine, in one run.
bench:
	./scripts/setup.sh test
	.venv/bin/python benchmarks/run.py $(ARGS)
