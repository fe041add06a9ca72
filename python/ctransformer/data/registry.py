"""The data files ctransformer knows: where each comes from and the checksums a copy must match.

The numbers are those of ``../shared/data/README.md``; ``tests/data/test_data_fetch.py`` checks them
against the shared files. A file's ``path`` is its place under the data folder (and under the cache).
"""
import dataclasses
from typing import Dict


@dataclasses.dataclass(frozen=True)
class DataFile:
    path: str            # under the data folder, e.g. "tinyshakespeare/input.txt.gz"
    sha256: str          # of the stored .gz (what a mirror serves)
    size: int            # bytes of the stored .gz
    content_sha256: str  # of the uncompressed content
    content_size: int    # bytes of the uncompressed content
    url: str             # canonical public source, at a fixed commit
    # True when the canonical source is the uncompressed text: the download is checked against
    # content_sha256 and gzip-compressed on the way into the cache.
    source_is_text: bool = False


def _github(repo, commit, path):
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_MULTI30K = ("multi30k/dataset", "a3d2e0d26b56f3846f66a952536ffed4e401d05a")
_CHAR_RNN = ("karpathy/char-rnn", "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e")


def _multi30k(name, source_name, sha256, size, content_sha256, content_size):
    # The stored .gz files are byte copies of the source blobs; only the test files were renamed.
    return DataFile(f"multi30k/{name}", sha256, size, content_sha256, content_size,
                    _github(*_MULTI30K, f"data/task1/raw/{source_name}"))


FILES: Dict[str, DataFile] = {f.path: f for f in [
    DataFile("tinyshakespeare/input.txt.gz",
             "bed00f18e91cda6838950656f0a95e07e0f4dbe8649a4b959f7602a7e53fbc6e", 433627,
             "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", 1115394,
             _github(*_CHAR_RNN, "data/tinyshakespeare/input.txt"), source_is_text=True),
    _multi30k("train.de.gz", "train.de.gz",
              "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6", 637044,
              "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72", 2110398),
    _multi30k("train.en.gz", "train.en.gz",
              "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f", 568929,
              "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6", 1801238),
    _multi30k("val.de.gz", "val.de.gz",
              "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a", 24681,
              "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660", 75981),
    _multi30k("val.en.gz", "val.en.gz",
              "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28", 21650,
              "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227", 63297),
    _multi30k("test2016.de.gz", "test_2016_flickr.de.gz",
              "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8", 22890,
              "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16", 70649),
    _multi30k("test2016.en.gz", "test_2016_flickr.en.gz",
              "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9", 21077,
              "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182", 62076),
]}


def lookup(path: str) -> DataFile:
    """The registry entry of ``path``; ValueError naming the known paths when there is none."""
    try:
        return FILES[path]
    except KeyError:
        raise ValueError(f"unknown data file {path!r}: expected one of {', '.join(sorted(FILES))}") from None
