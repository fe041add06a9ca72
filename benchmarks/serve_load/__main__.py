"""`python benchmarks/serve_load [ARGS]`, or `python -m serve_load [ARGS]` in benchmarks/: the benchmark's run
(cli.main; the package's docstring says what it measures). `... gpt [ARGS]`: a GPT's chat against its completions
under load (gpt.py); `... llama [ARGS]`: our served GPT against llama.cpp's llama-server (llama.py); `... versions A=FOLDER,B=FOLDER [ARGS]`: installed versions in turn under one load
(versions.py)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.dirname(HERE)

# Run as a folder, Python puts the folder itself first on the path: its modules would then also import as top-level
# names (client, servers, ...), shadowing any of that name. The package's parent, benchmarks/, goes there instead:
# it holds the package and the modules the package imports (cases, measure, ct2_process, level_cap).
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == HERE:
    sys.path[0] = BENCHMARKS
elif BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)

# `serve_load gpt ...`, `serve_load llama ...` and `serve_load versions ...` are runs of their own (gpt.py, llama.py,
# versions.py); anything else is
# the main run's arguments (cli.py).
COMMANDS = {"gpt": "serve_load.gpt", "llama": "serve_load.llama", "versions": "serve_load.versions"}

if __name__ == "__main__":
    import importlib

    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command in COMMANDS:
        sys.exit(importlib.import_module(COMMANDS[command]).main(sys.argv[2:]))
    sys.exit(importlib.import_module("serve_load.cli").main())
