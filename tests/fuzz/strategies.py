"""Hypothesis strategies shared by the fuzz tests: shapes, arrays in every layout, hostile values.

Arrays come in any memory layout NumPy has: C-contiguous, Fortran, strided slices, negative
strides, broadcast (zero strides), read-only. Values include +-inf, signed zeros and subnormals
unless a test asks for finite ones; NaN only where asked (ct.tensor refuses it, by design).
"""
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

# Dimensions: zero and one are where the loops' edge cases live; up to 7 keeps calls cheap.
dims = st.integers(0, 7)
nonzero_dims = st.integers(1, 7)


def shapes(min_dims=0, max_dims=4, min_side=0, max_side=7):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def floats(finite=False, width=32, nan=False):
    """Finite: moderate values; else any float including +-inf (and NaN when `nan`: ct.tensor
    refuses NaN input by design, so NaN reaches the ops only by arithmetic, e.g. inf - inf)."""
    if finite:
        return st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=width)
    return st.floats(width=width, allow_subnormal=True, allow_nan=nan)


@st.composite
def layouts(draw, array):
    """The same values in another memory layout: the test compares against `array` itself."""
    kind = draw(st.sampled_from(["c", "fortran", "reversed", "strided", "readonly", "broadcast"]))
    if kind == "fortran" and array.ndim:  # (asfortranarray makes 0-d arrays 1-d)
        out = np.asfortranarray(array)
    elif kind == "reversed" and array.ndim:
        # A copy laid out backwards, then flipped back: same values, negative strides.
        out = np.flip(np.flip(array).copy())
    elif kind == "strided" and array.ndim:
        # Every other element of a twice-as-long buffer along the last dimension.
        wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
        wide[..., ::2] = array
        out = wide[..., ::2]
    elif kind == "broadcast" and array.ndim and array.size and (array == array.reshape(-1)[0]).all():
        out = np.broadcast_to(array.reshape(-1)[:1].reshape((1,) * array.ndim), array.shape)
    else:
        out = array.copy()
    if kind == "readonly":
        out.setflags(write=False)
    assert np.array_equal(out, array, equal_nan=True)
    return out


@st.composite
def float_arrays(draw, shape=None, finite=True, dtype=np.float32, elements=None):
    """A float32 array (or `dtype`) of `shape` (drawn when None), in a random layout."""
    if shape is None:
        shape = draw(shapes())
    if elements is None:
        elements = floats(finite=finite, width=32 if dtype in (np.float32, np.float16) else 64)
        if dtype == np.float16:
            elements = st.floats(-1e3, 1e3, width=16) if finite else st.floats(width=16, allow_nan=False)
    array = draw(hnp.arrays(dtype, shape, elements=elements))
    return draw(layouts(array))


# Values that break naive integer conversions: negative, huge, past int64, bool, float, None.
hostile_ints = st.one_of(
    st.integers(-3, -1),
    st.sampled_from([2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 40, 2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64, -(2 ** 63),
                     -(2 ** 63) - 1, 10 ** 30]),
)
hostile_floats = st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, -1e-30, 0.0, 1e308, 1e-320])
non_numbers = st.sampled_from([None, "3", b"3", [3], {"a": 1}, object(), 3j])

# Exceptions a bad argument may raise: anything else (or a crash) is a failure.
CLEAR_ERRORS = (ValueError, TypeError, IndexError, RuntimeError, MemoryError, OverflowError)


def assert_names(error, *names):
    """The message of `error` names one of `names` (the argument at fault)."""
    message = str(error)
    assert any(name in message for name in names), f"{type(error).__name__} does not name {names}: {message}"
