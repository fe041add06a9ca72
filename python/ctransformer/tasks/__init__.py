"""The seeds' training tasks, each a class with defaults, build, train_step, evaluate and samples."""
from .shakespeare import Shakespeare

TASKS = {"shakespeare": Shakespeare}
