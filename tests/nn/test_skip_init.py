"""nn.utils.skip_init (torch.nn.utils.skip_init): a module built without initialising its parameters, for a model
whose every parameter is loaded next (from_pretrained uses it)."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.nn.utils import skip_init


def test_parameters_are_left_zeros_and_nothing_is_drawn():
    ct.manual_seed(3)
    before = ct.get_rng_state()
    linear = skip_init(ct.nn.Linear, 6, 4)
    gpt = skip_init(ct.nn.GPT, vocab_size=50, max_seq_len=16, d_model=32, n_head=4, d_inner=64, n_layers=2)
    assert ct.get_rng_state() == before
    for model in (linear, gpt):
        for name, value in model.state_dict().items():
            if name.endswith("weight") and value.ndim == 2:
                assert not value.any(), name
    assert linear.weight.shape == (4, 6) and linear.bias.shape == (4,)
    # built as module_cls(*args, **kwargs): the arguments reach the constructor
    assert gpt.n_layers == 2 and gpt.d_model == 32


def test_initialisation_draws_again_afterwards():
    """The guard lives while the module is built: a Linear built next draws what it would have without it, and so
    does one after a constructor that raised inside skip_init."""
    ct.manual_seed(4)
    want = ct.nn.Linear(6, 4).weight.numpy()
    ct.manual_seed(4)
    skip_init(ct.nn.Linear, 6, 4)
    np.testing.assert_array_equal(ct.nn.Linear(6, 4).weight.numpy(), want)
    ct.manual_seed(4)
    with pytest.raises(Exception):
        skip_init(ct.nn.GPT, vocab_size=50, max_seq_len=16, d_model=30, n_head=4, d_inner=64, n_layers=2)
    np.testing.assert_array_equal(ct.nn.Linear(6, 4).weight.numpy(), want)
    assert ct.nn.Linear(6, 4).weight.numpy().any()


def test_a_python_module_class_and_bad_arguments():
    class Two(ct.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.first = ct.nn.Linear(width, width)
            self.second = ct.nn.Linear(width, 2)

    two = skip_init(Two, 3)
    assert not two.first.weight.numpy().any() and not two.second.bias.numpy().any()
    with pytest.raises(TypeError, match="module_cls must be a module class"):
        skip_init(3, 4)


def test_from_pretrained_draws_nothing_and_loads_every_parameter(tmp_path):
    """GPT.from_pretrained builds with skip_init: the generator is where it was, and every parameter is the file's
    (a zero left by a parameter the load missed would show here)."""
    ct.manual_seed(5)
    model = ct.nn.GPT(vocab_size=50, max_seq_len=16, d_model=32, n_head=4, d_inner=64, n_layers=2)
    model.save_pretrained(tmp_path)
    before = ct.get_rng_state()
    loaded = ct.nn.GPT.from_pretrained(tmp_path)
    assert ct.get_rng_state() == before
    want = model.state_dict()
    got = loaded.state_dict()
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
