"""Data for the seeds' tasks: the copy task, seed 003's toy translation, Tiny Shakespeare."""
from .paths import data_dir
from .copy_task import copy_batch
from .toy_translation import VOCAB_X, VOCAB_Y, PAD, SOS, EOS, toy_translation_batch, toy_translation_sample, decode_tokens
from .shakespeare import CharDataset

__all__ = [
    "data_dir", "copy_batch", "VOCAB_X", "VOCAB_Y", "PAD", "SOS", "EOS", "toy_translation_batch",
    "toy_translation_sample", "decode_tokens", "CharDataset",
]
