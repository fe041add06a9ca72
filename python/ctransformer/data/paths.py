"""Where the shared data lives: $CTRANSFORMER_DATA, else ``../shared/data`` beside the repository."""
import os
import pathlib


def data_dir() -> pathlib.Path:
    env = os.environ.get("CTRANSFORMER_DATA")
    if env:
        return pathlib.Path(env)
    # From the working directory (the repository root) or from wherever this package sits in it
    # (python/ctransformer, or .venv/lib/.../site-packages/ctransformer).
    starts = [pathlib.Path.cwd(), *pathlib.Path(__file__).resolve().parents]
    for start in starts:
        candidate = start / ".." / "shared" / "data"
        if candidate.is_dir():
            return candidate.resolve()
    raise FileNotFoundError("the shared data folder was not found: run from the repository root, where "
                            "../shared/data exists, or set CTRANSFORMER_DATA to its path")
