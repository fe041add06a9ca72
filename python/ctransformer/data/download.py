"""A data file by name: a local copy if there is one, else downloaded once into the user cache.

``fetch("tinyshakespeare/input.txt.gz")`` looks for the file, in order, in

1. ``$CTRANSFORMER_DATA``,
2. ``../shared/data`` beside the repository (``paths.shared_data_dir``),
3. the user cache, ``$XDG_CACHE_HOME/ctransformer`` (default ``~/.cache/ctransformer``),

and returns the first copy found. The first time a process sees a copy it checks it against the
registry (size and sha256 of the uncompressed content), so a truncated or foreign file is an error,
never data. When no folder has the file it is downloaded into the cache from its canonical URL
(``registry.FILES``), or from ``$CTRANSFORMER_DATA_MIRROR/<path>`` when that is set (a mirror serves
the stored .gz files, checked against their sha256). The download goes to a temporary file in the
cache folder, is fsynced and checked, then renamed into place with ``os.replace``: a reader sees the
whole checked file or none, and a failure (offline, cut transfer, checksum, Ctrl-C) leaves nothing.

Tiny Shakespeare's canonical source is the uncompressed ``input.txt``. Its download is checked against
the uncompressed sha256 and stored gzip-compressed under the standard name ``input.txt.gz``, so every
reader opens one name wherever the file came from. That .gz is zlib's output, not byte-identical to the
shared copy (GNU gzip's), which is why local copies are checked by their uncompressed content.
"""
import gzip
import hashlib
import http.client
import os
import pathlib
import socket
import sys
import tempfile
import urllib.error
import urllib.request
import zlib

from tqdm import tqdm

from . import paths
from .registry import DataFile, lookup

MIRROR_VARIABLE = "CTRANSFORMER_DATA_MIRROR"
TIMEOUT_SECONDS = 60
_CHUNK = 1 << 16

# Copies already checked by this process, as path -> (size, mtime): a file is hashed once, not per read.
_checked = {}


class DataFetchError(OSError):
    """A data file could not be had: download failed (offline, HTTP error, cut transfer), the download
    or a local copy did not match its checksum. An OSError, as a missing file is: the data is not there.

    Attributes: ``path`` (under the data folder), ``url`` (None for a bad local copy) and
    ``expected_sha256``.
    """

    def __init__(self, message, *, path, url, expected_sha256):
        super().__init__(message)
        self.path, self.url, self.expected_sha256 = path, url, expected_sha256


def fetch(path: str) -> pathlib.Path:
    """The local path of the data file ``path`` (e.g. ``"multi30k/train.de.gz"``), downloaded if need be.

    ValueError for a path the registry does not know; DataFetchError when no checked copy can be had.
    """
    entry = lookup(path)
    folders = [paths.env_data_dir(), paths.shared_data_dir(), paths.cache_dir()]
    for folder in folders:
        if folder is not None and (folder / path).is_file():
            _check_local(entry, folder / path)
            return folder / path
    return _download(entry, paths.cache_dir() / path)


def source_url(entry: DataFile) -> str:
    """Where ``entry`` is downloaded from: the mirror's ``<base>/<path>`` if set, else its canonical URL."""
    mirror = os.environ.get(MIRROR_VARIABLE)
    return f"{mirror.rstrip('/')}/{entry.path}" if mirror else entry.url


def _check_local(entry, path):
    stat = path.stat()
    stamp = (stat.st_size, stat.st_mtime_ns)
    if _checked.get(str(path)) != stamp:
        _check_content(entry, path)
        _checked[str(path)] = stamp


def _check_content(entry, path):
    digest, size = hashlib.sha256(), 0
    try:
        with gzip.open(path, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                digest.update(chunk)
                size += len(chunk)
    except (OSError, EOFError, zlib.error) as e:
        raise _bad_local(entry, path, f"is not a readable gzip file ({e})") from e
    if size != entry.content_size or digest.hexdigest() != entry.content_sha256:
        raise _bad_local(entry, path, f"uncompresses to {size} bytes with sha256 {digest.hexdigest()}")


def _bad_local(entry, path, what):
    return DataFetchError(
        f"{path} {what}; expected {entry.path} with {entry.content_size} bytes and sha256 {entry.content_sha256} "
        f"uncompressed. Delete or replace it (a file deleted from the cache {paths.cache_dir()} is downloaded "
        f"again), or point CTRANSFORMER_DATA at a good copy.",
        path=entry.path, url=None, expected_sha256=entry.content_sha256)


def _progress(total, description):
    # A bar for a person watching; logs and pipes get nothing.
    return tqdm(total=total, desc=description, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
                disable=not sys.stderr.isatty())


def _download(entry, destination):
    url = source_url(entry)
    # Only the canonical Tiny Shakespeare is raw text; a mirror serves the stored .gz like the rest.
    compress = entry.source_is_text and url == entry.url
    expected_sha256, expected_size = ((entry.content_sha256, entry.content_size) if compress
                                      else (entry.sha256, entry.size))

    def failure(reason):
        return DataFetchError(
            f"could not fetch {entry.path}: {reason}. URL: {url}; expected {expected_size} bytes with sha256 "
            f"{expected_sha256}. Set CTRANSFORMER_DATA to a folder holding {entry.path}, or "
            f"{MIRROR_VARIABLE} to a base URL serving <base>/{entry.path}, or put the file at {destination}.",
            path=entry.path, url=url, expected_sha256=expected_sha256)

    destination.parent.mkdir(parents=True, exist_ok=True)
    # In the destination's folder, so os.replace is a rename within one file system.
    handle, temporary = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".part")
    temporary = pathlib.Path(temporary)
    try:
        with os.fdopen(handle, "wb") as out:
            try:
                if compress:
                    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as sink:
                        received, sha256, announced = _receive(url, sink, entry.path, expected_size)
                else:
                    received, sha256, announced = _receive(url, out, entry.path, expected_size)
            except urllib.error.HTTPError as e:
                raise failure(f"HTTP {e.code} {e.reason}") from e
            except urllib.error.URLError as e:
                raise failure(e.reason) from e
            except (http.client.HTTPException, ConnectionError, socket.timeout) as e:
                raise failure(f"{type(e).__name__}: {e}") from e
            out.flush()
            os.fsync(out.fileno())
        # http.client ends a body cut short without an error, so count it.
        if announced is not None and received != announced:
            raise failure(f"the transfer was interrupted after {received} of {announced} bytes")
        if received != expected_size or sha256 != expected_sha256:
            raise failure(f"checksum mismatch: got {received} bytes with sha256 {sha256}")
        # Cheap next to the download; proves the .gz written here (Tiny Shakespeare) reads back.
        _check_content(entry, temporary)
        os.replace(temporary, destination)
    except BaseException:
        # Also on KeyboardInterrupt: a partial file must not outlive the attempt.
        temporary.unlink(missing_ok=True)
        raise
    _sync_folder(destination.parent)
    stat = destination.stat()
    _checked[str(destination)] = (stat.st_size, stat.st_mtime_ns)  # its content was checked above
    return destination


def _receive(url, sink, description, expected_size):
    """Streams ``url`` into ``sink``: (bytes received, their sha256, Content-Length or None)."""
    digest, received = hashlib.sha256(), 0
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        header = response.headers.get("Content-Length")
        announced = int(header) if header is not None else None
        with _progress(announced or expected_size, description) as bar:
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                digest.update(chunk)
                sink.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    return received, digest.hexdigest(), announced


def _sync_folder(folder):
    # Makes the rename itself durable; POSIX only (Windows cannot open a folder).
    if hasattr(os, "O_DIRECTORY"):
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
