"""The folders a data file is looked for in: $CTRANSFORMER_DATA, ``../shared/data``, the user cache.

``download.fetch`` searches them in that order, file by file. Tests hide the shared folder by
monkeypatching ``shared_data_dir`` (download.fetch calls it through this module).
"""
import os
import pathlib
from typing import Optional


def env_data_dir() -> Optional[pathlib.Path]:
    """$CTRANSFORMER_DATA, or None when it is unset or empty.

    A value that is not a folder is an error rather than a folder to skip: it is almost surely a typo,
    and skipping it would quietly read the data from somewhere else.
    """
    env = os.environ.get("CTRANSFORMER_DATA")
    if not env:
        return None
    path = pathlib.Path(env).expanduser()
    if not path.is_dir():
        raise NotADirectoryError(f"CTRANSFORMER_DATA={env!r}: expected a folder holding the data files "
                                 f"(e.g. tinyshakespeare/input.txt.gz); unset it to use the shared folder or the cache")
    return path


def shared_data_dir() -> Optional[pathlib.Path]:
    """``../shared/data`` beside the repository, or None when there is none.

    Looked for from the working directory (the repository root) and from wherever this package sits
    (python/ctransformer, or .venv/lib/.../site-packages/ctransformer).
    """
    for start in [pathlib.Path.cwd(), *pathlib.Path(__file__).resolve().parents]:
        candidate = start / ".." / "shared" / "data"
        if candidate.is_dir():
            return candidate.resolve()
    return None


def cache_dir() -> pathlib.Path:
    """$XDG_CACHE_HOME/ctransformer, default ~/.cache/ctransformer; not created here.

    As the XDG spec says, an empty or relative $XDG_CACHE_HOME is ignored.
    """
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg and os.path.isabs(xdg) else pathlib.Path.home() / ".cache"
    return base / "ctransformer"


def data_dir() -> pathlib.Path:
    """The folder of a full local copy of the data: $CTRANSFORMER_DATA, else ``../shared/data``.

    Kept for callers that want the folder itself; readers should call ``ctransformer.data.fetch(path)``,
    which also looks in the cache and downloads what is missing.
    """
    found = env_data_dir() or shared_data_dir()
    if found is None:
        raise FileNotFoundError("the shared data folder was not found: run from the repository root, where "
                                "../shared/data exists, or set CTRANSFORMER_DATA to its path; "
                                "ctransformer.data.fetch(path) downloads single files into the cache instead")
    return found
