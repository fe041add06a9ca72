"""``torch.nn.utils``'s names that ctransformer has.

``skip_init(module_cls, *args, **kwargs)`` builds a module without initialising its parameters (left zeros,
nothing drawn from the generator), for a model whose every parameter is loaded next: ``from_pretrained`` uses it.
"""
from .._core.nn import skip_init

__all__ = ["skip_init"]
