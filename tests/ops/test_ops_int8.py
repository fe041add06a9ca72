"""The int8 product (ctransformer.quantization; cpp/include/ctransformer/int8.hpp), exact to the bit.

- The quantisation of a row is exact against its NumPy model: amax = max |x|, q = rint(x * (127 / amax))
  (ties to even), scale = amax / 127, all float32; a row of zeros gives q = 0, scale 0; a row holding NaN
  or inf gives q = 0 and scale = that amax, so its outputs are NaN.
- Every kernel this CPU can run (AMX, AVX-512 VNNI, AVX-VNNI, AVX2, portable) gives the exact int32 sums of
  an int64 reference, on awkward shapes (1 to 50 rows; k = 1, 3, 5, 17 and beyond 256; columns around the
  kernels' 16- and 64-column blocks; for AMX's tiles, 9 rows and more: whole and part blocks of 16 and 32 rows,
  k in whole steps of 64 and with a part step) and at the extremes where a kernel could overflow or saturate
  (|q| = 127 everywhere; activations of -128; k = 4096).
- linear_int8 equals the NumPy model of its float32 epilogue bit for bit (the kernels are compiled
  without FMA contraction, so float32(acc) * (s_x alpha * s_w) + b rounds as NumPy does), with and
  without bias, alpha != 1, on 1 and 2 threads; and the kernels agree with each other to the bit.
- Bad arguments raise ValueError or TypeError naming the argument.
No tolerance appears here: the sums are integers and the epilogue is specified operation by operation.
"""
import contextlib

import numpy as np
import pytest

import ctransformer as ct
from ctransformer import quantization as Q

KERNELS = Q.int8_kernels_available()
SHAPES = [(1, 1, 1), (1, 5, 3), (2, 3, 16), (3, 17, 17), (4, 256, 64), (5, 257, 65), (7, 100, 63),
          (13, 64, 130), (17, 33, 1000), (33, 512, 96), (1, 512, 2049), (16, 64, 48), (32, 768, 70),
          (50, 200, 96)]


@pytest.fixture(params=KERNELS)
def kernel(request):
    Q.set_int8_kernel(request.param)
    yield request.param
    Q.set_int8_kernel("auto")


@contextlib.contextmanager
def every_kernel():
    """For a test that forces each kernel in turn (Q.set_int8_kernel) in one body: the choice goes back to
    'auto' however the body ends, so a failure leaves no kernel forced for the tests after it."""
    try:
        yield KERNELS
    finally:
        Q.set_int8_kernel("auto")


def quantize_model(x):
    """int8.hpp's row rule in NumPy float32."""
    x = np.asarray(x, np.float32)
    amax = np.abs(x).max(axis=1) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    ok = np.isfinite(amax) & (amax > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(ok, amax / np.float32(127), amax).astype(np.float32)
        inv = np.where(ok, np.float32(127) / amax, 0).astype(np.float32)
        q = np.where(ok[:, None], np.rint(x * inv[:, None]), 0).astype(np.int8)
    return q, scale


def linear_model(x, w, bias=None, alpha=1.0):
    """linear_int8 in NumPy: exact int64 sums, then the float32 epilogue in int8.hpp's order."""
    qx, sx = quantize_model(x)
    qw, sw = quantize_model(w)
    acc = qx.astype(np.int64) @ qw.astype(np.int64).T
    s = (sx * np.float32(alpha)).astype(np.float32)[:, None] * sw[None, :]
    with np.errstate(invalid="ignore"):
        y = acc.astype(np.float32) * s
    return y if bias is None else y + np.asarray(bias, np.float32)


def test_row_rule_is_exact():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 300)).astype(np.float32) * np.float32(3)
    x[1] = 0                                   # zeros: q 0, scale 0
    x[2, :5] = [127, 2.5, 3.5, -2.5, -0.5]     # amax 127: inv = 1, so these are exact ties (to even)
    x[2, 5:] = 0
    x[3] *= np.float32(1e-30)                  # tiny scales stay normal floats
    x[4] *= np.float32(1e30)
    mq, ms = quantize_model(x)
    with every_kernel() as kernels:
        for kernel in kernels:
            Q.set_int8_kernel(kernel)
            q, s = Q.quantize_rows(x)
            np.testing.assert_array_equal(q, mq, err_msg=kernel)
            np.testing.assert_array_equal(s, ms, err_msg=kernel)
            assert list(q[2, :5]) == [127, 2, 4, -2, 0]
    w = Q.quantize_weight(x)
    mq, ms = quantize_model(x)
    np.testing.assert_array_equal(w.q, mq)
    np.testing.assert_array_equal(w.scale, ms)
    assert np.abs(w.dequantize() - x).max() <= np.abs(x).max(axis=1).max() / 127 / 2 * 1.0001


@pytest.mark.parametrize("signs", ["mixed", "mixed above -128", "nonnegative", "one negative"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_kernels_sum_exactly(kernel, m, k, n, signs):
    # "nonnegative": a ReLU's output, which the AVX2 kernel multiplies with no sign moved over;
    # "one negative": the same but for one value, which must send the whole product down the signed path;
    # "mixed": with -128, which the AVX2 kernel cannot take and matmul_s32 splits into -127 and -1;
    # "mixed above -128": what quantisation gives, straight through the signed path.
    rng = np.random.default_rng(m * 1000 + k + n)
    low = {"mixed": -128, "mixed above -128": -127}.get(signs, 0)
    qx = rng.integers(low, 128, (m, k)).astype(np.int8)
    if signs == "one negative":
        qx[m - 1, k - 1] = -rng.integers(1, 129)
    qw = rng.integers(-127, 128, (n, k)).astype(np.int8)
    w = Q.Int8Weight(qw, np.ones(n, np.float32))
    np.testing.assert_array_equal(w.q, qw)
    np.testing.assert_array_equal(Q.matmul_s32(qx, w), qx.astype(np.int64) @ qw.astype(np.int64).T)


@pytest.mark.parametrize("m", [5, 20])   # 20: AMX's tiles (9 rows and more)
@pytest.mark.parametrize("a,b", [(127, 127), (127, -127), (-128, 127), (-128, -127), (-127, -127)])
def test_kernels_neither_saturate_nor_overflow(kernel, a, b, m):
    # vpmaddubsw would saturate 2 x 255 x 127 and does not see it here; 4096 x 128 x 127 needs 27 bits.
    k, n = 4096, 33
    qx = np.full((m, k), a, np.int8)
    qw = np.full((n, k), b, np.int8)
    acc = Q.matmul_s32(qx, Q.Int8Weight(qw, np.ones(n, np.float32)))
    assert (acc == a * b * k).all()


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_linear_is_its_numpy_model(kernel, m, k, n, threads, num_threads):
    rng = np.random.default_rng(m + 7 * k + 13 * n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    W = Q.quantize_weight(w)
    num_threads(threads)
    np.testing.assert_array_equal(Q.linear_int8(x, W, b), linear_model(x, w, b))
    np.testing.assert_array_equal(Q.linear_int8(x, W, None, 0.125), linear_model(x, w, None, 0.125))


@pytest.mark.skipif(len(KERNELS) < 2, reason=f"this CPU runs only the {KERNELS[-1]!r} int8 kernel: "
                    "nothing to compare it with (it would be compared with itself)")
def test_kernels_agree_to_the_bit():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((37, 300)).astype(np.float32)
    W = Q.quantize_weight(rng.standard_normal((130, 300)).astype(np.float32))
    outs = {}
    with every_kernel() as kernels:
        for kernel in kernels:
            Q.set_int8_kernel(kernel)
            assert Q.int8_kernel() == kernel            # the kernel asked for is the one that ran
            outs[kernel] = Q.linear_int8(x, W)
    for kernel in KERNELS[1:]:
        np.testing.assert_array_equal(outs[kernel], outs[KERNELS[0]], err_msg=kernel)


def test_non_finite_rows_give_nan_rows_only(kernel):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 40)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, 39] = np.inf
    W = Q.quantize_weight(rng.standard_normal((20, 40)).astype(np.float32))
    y = Q.linear_int8(x, W)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all()
    np.testing.assert_array_equal(y[[0, 3]], linear_model(x[[0, 3]], W.dequantize()))


def test_the_best_kernel_is_chosen_by_default():
    Q.set_int8_kernel("auto")
    assert Q.int8_kernel() == KERNELS[0]
    cpu = ct.build_info()["cpu"]
    if "amx" in ct.kernel_levels():
        assert KERNELS[0] == "amx_int8"
    elif cpu["avx512_vnni"] and cpu["simd_level"] == "avx512":
        assert KERNELS[0] == "avx512_vnni"
    assert KERNELS[-1] == "portable"


def test_bad_arguments():
    W = Q.quantize_weight(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="set_int8_kernel: 'sse9'"):
        Q.set_int8_kernel("sse9")
    with pytest.raises(ValueError, match="x: expected 4 columns"):
        Q.linear_int8(np.ones((2, 5), np.float32), W)
    with pytest.raises(ValueError, match="x: expected a 2-D array"):
        Q.linear_int8(np.ones(4, np.float32), W)
    with pytest.raises(TypeError, match="x: expected float values"):
        Q.linear_int8(np.ones((2, 4), np.int32), W)
    with pytest.raises(ValueError, match="bias: expected shape \\(3,\\)"):
        Q.linear_int8(np.ones((2, 4), np.float32), W, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="qx: expected dtype int8"):
        Q.matmul_s32(np.ones((2, 4), np.int16), W)
    with pytest.raises(ValueError, match="-128"):
        Q.Int8Weight(np.full((2, 2), -128, np.int8), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="scale: expected a float32 array of shape \\(2,\\)"):
        Q.Int8Weight(np.ones((2, 2), np.int8), np.ones(3, np.float32))
