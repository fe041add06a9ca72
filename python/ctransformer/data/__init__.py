"""Data for the training tasks: the copy task, the toy translation, Tiny Shakespeare; Multi30k's files.

``fetch(path)`` gives a registered data file's local path, downloading it into the user cache when
no local folder has it (see ``download.py``).
"""
from .paths import data_dir, cache_dir
from .registry import DataFile, FILES
from .download import DataFetchError, fetch
from .copy_task import copy_batch
from .toy_translation import VOCAB_X, VOCAB_Y, PAD, SOS, EOS, toy_translation_batch, toy_translation_sample, decode_tokens
from .shakespeare import CharDataset
from .marian_tokenizer import MarianTokenizer

__all__ = [
    "data_dir", "cache_dir", "DataFile", "FILES", "DataFetchError", "fetch", "copy_batch", "VOCAB_X", "VOCAB_Y",
    "PAD", "SOS", "EOS", "toy_translation_batch", "toy_translation_sample", "decode_tokens", "CharDataset",
    "MarianTokenizer",
]
