"""A parallel corpus: two files of sentences, one a line, line i of one the translation of line i of the other.

Plain or gzip-compressed (told by the file's first two bytes, not by its name), UTF-8. Multi30k
(German→English, ``multi30k/{train,val,test2016}.{de,en}.gz``) is the default corpus of the
``multi30k`` task; any other is named by its files, as fairseq and Marian take theirs.
"""
import dataclasses
import gzip
import os
from typing import List, Optional, Tuple

from .download import fetch

MULTI30K_SPLITS = ("train", "val", "test2016")


class CorpusError(ValueError):
    """A corpus file that cannot be read as sentences, or two sides that do not pair up."""


def read_lines(path) -> List[str]:
    """The lines of a plain or gzipped UTF-8 text file, without their line ends.

    Each line is stripped of surrounding whitespace (Multi30k's train.de has 40 lines with stray
    spaces at their ends; a subword model would drop them anyway). Empty lines are kept, so line
    numbers still pair up with the other side.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"read_lines: no file at {path!r}")
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    try:
        opener = gzip.open if gzipped else open
        with opener(path, "rt", encoding="utf-8", newline="\n") as f:
            return [line.rstrip("\n").rstrip("\r").strip() for line in f]
    except UnicodeDecodeError as error:
        raise CorpusError(f"read_lines: {path} is not UTF-8 text ({error})") from error
    except (OSError, EOFError) as error:   # a truncated or damaged .gz
        raise CorpusError(f"read_lines: {path} cannot be read ({error})") from error


@dataclasses.dataclass
class ParallelCorpus:
    """Sentence pairs: ``src[i]`` translates to ``tgt[i]``; the files they came from, for messages."""

    src: List[str]
    tgt: List[str]
    src_path: str = ""
    tgt_path: str = ""

    def __len__(self):
        return len(self.src)

    def pairs(self):
        return zip(self.src, self.tgt)

    def without_empty(self) -> Tuple["ParallelCorpus", int]:
        """(the pairs whose two sides are both non-empty, how many were dropped)."""
        keep = [i for i, (s, t) in enumerate(self.pairs()) if s and t]
        corpus = ParallelCorpus([self.src[i] for i in keep], [self.tgt[i] for i in keep], self.src_path, self.tgt_path)
        return corpus, len(self) - len(keep)


def read_parallel(src_path, tgt_path) -> ParallelCorpus:
    """Both sides of a corpus; CorpusError naming both files when their line counts differ."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise CorpusError(f"read_parallel: {os.fspath(src_path)} has {len(src)} lines but {os.fspath(tgt_path)} "
                          f"has {len(tgt)}; a parallel corpus needs one target line per source line")
    if not src:
        raise CorpusError(f"read_parallel: {os.fspath(src_path)} and {os.fspath(tgt_path)} are empty")
    return ParallelCorpus(src, tgt, os.fspath(src_path), os.fspath(tgt_path))


def multi30k_paths(split: str, src_lang: str = "de", tgt_lang: str = "en") -> Tuple[str, str]:
    """Local paths of a Multi30k split's two files (fetched, and checked, as every data file)."""
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"multi30k: split must be one of {', '.join(MULTI30K_SPLITS)}, got {split!r}")
    for lang in (src_lang, tgt_lang):
        if lang not in ("de", "en"):
            raise ValueError(f"multi30k: languages are 'de' and 'en', got {lang!r}")
    return str(fetch(f"multi30k/{split}.{src_lang}.gz")), str(fetch(f"multi30k/{split}.{tgt_lang}.gz"))


def multi30k(split: str, src_lang: str = "de", tgt_lang: str = "en") -> ParallelCorpus:
    """A Multi30k split (train 29000, val 1014, test2016 1000 pairs), German→English by default."""
    return read_parallel(*multi30k_paths(split, src_lang, tgt_lang))


def corpus_from_options(src: Optional[str], tgt: Optional[str], split: str, option: str) -> ParallelCorpus:
    """The corpus named by a task's ``{option}_src``/``{option}_tgt`` files, else Multi30k's `split`."""
    if bool(src) != bool(tgt):
        raise ValueError(f"{option}_src and {option}_tgt go together: got {option}_src={src!r}, {option}_tgt={tgt!r}")
    return read_parallel(src, tgt) if src else multi30k(split)
