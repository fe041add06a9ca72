"""The old name of ``ctransformer.annotated`` (the Annotated Transformer's training pieces), kept so that old
code runs; it warns once when imported."""
import warnings

from .annotated import *  # noqa: F401,F403
from .annotated import __all__  # noqa: F401

warnings.warn("ctransformer.training is now ctransformer.annotated", FutureWarning, stacklevel=2)
