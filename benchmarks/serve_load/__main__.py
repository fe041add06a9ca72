"""`python benchmarks/serve_load [ARGS]`, or `python -m serve_load [ARGS]` in benchmarks/: the benchmark's run
(cli.main; the package's docstring says what it measures)."""
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

from serve_load.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
