"""The old name of ``ctransformer.translator`` (Translator, the multi30k model and checkpoint readers, BLEU),
kept so that old code runs; it warns once when imported."""
import warnings

from .translator import *  # noqa: F401,F403
from .translator import __all__  # noqa: F401

warnings.warn("ctransformer.translation is now ctransformer.translator", FutureWarning, stacklevel=2)
