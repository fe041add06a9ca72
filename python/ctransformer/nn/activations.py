"""The activations as modules (torch.nn.ReLU, GELU, SiLU): for Sequential, and for models that
name their activation as a layer. They hold no parameters."""
from .. import functional as F
from .._core.nn import Module


class ReLU(Module):
    """max(x, 0)."""

    def forward(self, input):
        return F.relu(input)


class GELU(Module):
    """torch.nn.GELU: approximate="none" (the default) is the exact erf form, "tanh" the tanh approximation."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input) if self.approximate == "tanh" else F.gelu_erf(input)


class SiLU(Module):
    """x * sigmoid(x)."""

    def forward(self, input):
        return F.silu(input)
