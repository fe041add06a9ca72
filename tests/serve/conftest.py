"""The engine's tests compare with the decoding tests' references and margins (tests/decode: test_decode's
GREEDY_MARGIN, test_beam_search's traced search), imported by their plain names as pytest imports those."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "decode"))
