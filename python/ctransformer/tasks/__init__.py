"""The seeds' training tasks, each a class with defaults, build, train_step, evaluate and samples."""
from .copy import Copy
from .multi30k import Multi30k
from .shakespeare import Shakespeare
from .toy_translate import ToyTranslate

TASKS = {"copy": Copy, "toy-translate": ToyTranslate, "shakespeare": Shakespeare, "multi30k": Multi30k}
