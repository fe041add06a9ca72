"""The training tasks, each a class with defaults, build, train_batch, loss, evaluate and samples."""
from .base import Run, Task
from .copy import Copy
from .multi30k import Multi30k
from .shakespeare import Shakespeare
from .toy_translate import ToyTranslate

TASKS = {task.name: task for task in (Copy, ToyTranslate, Shakespeare, Multi30k)}
