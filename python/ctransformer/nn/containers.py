"""ModuleList and Sequential, as torch.nn's: children named "0", "1", ... so state dicts match torch's.

Both are Python subclasses of ctransformer.nn.Module (its members registered by assignment), for models
written in Python; the C++ models hold their own lists.
"""
from .._core.nn import Module


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ... (torch.nn.ModuleList): index, iterate,
    append, extend, insert. It has no forward: its owner runs the modules."""

    def __init__(self, modules=None):
        super().__init__()
        self._items = []
        if modules is not None:
            self.extend(modules)

    def _renumber(self):
        # torch renumbers too: after an insert, the names follow the positions
        for i in range(len(self._items)):
            self.add_module(str(i), None)
        for i, module in enumerate(self._items):
            self.add_module(str(i), module)

    def _check(self, method, module):
        if not isinstance(module, Module):
            raise TypeError(f"{type(self).__name__}.{method}: module must be a ctransformer.nn.Module, got "
                            f"{type(module).__name__}")

    def _sliced(self, items):
        # a slice is a container of the same kind, as in torch
        return ModuleList(items)

    def append(self, module):
        self._check("append", module)
        self._items.append(module)
        self.add_module(str(len(self._items) - 1), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        self._check("insert", module)
        self._items.insert(index, module)
        self._renumber()

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._sliced(self._items[index])
        return self._items[index]

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)


class Sequential(ModuleList):
    """Modules run in order, each one's output the next one's input (torch.nn.Sequential)."""

    def __init__(self, *modules):
        super().__init__(modules)

    def _sliced(self, items):
        return Sequential(*items)

    def forward(self, input):
        for module in self._items:
            input = module(input)
        return input
