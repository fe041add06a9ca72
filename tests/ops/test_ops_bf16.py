"""bfloat16 rounding and the bf16 GEMM under autocast (ctransformer.amp).

- Rounding is exact against torch's own float32 -> bfloat16 conversion (round to nearest even, NaN
  quiet, subnormals kept): same bits, including ties, overflow to infinity and the largest finite values.
- The AVX512_BF16 kernel is exact, bit for bit, against a NumPy model of what it promises (bf16.hpp): per
  C element one float32 chain over k in pairs, acc += a[2p+1] b[2p+1] then acc += a[2p] b[2p], from 0
  (or from C); for at most 8 rows against a transposed B (decoding's products), 16 lanes of such chains
  added by halves. The product of two bf16 values is exact in float32, so NumPy's float32 a*b then + is the
  fused multiply-add the instruction does. Awkward shapes: 1, 7, 17, 193 and 4097 rows, k odd and not a
  multiple of the vector width, k across the kernel's 256-value blocks, every transpose, fp32 and bf16
  operands, beta 1 and alpha != 1, 1 and 2 threads. Skipped on a CPU without AVX512_BF16 (it cannot run).
- The aarch64 kernel (bfdot) adds rounding to odd, not to nearest (ARM's BF16 arithmetic with FPCR.EBF clear),
  so it is held to twice the float32 bound below: each of its k additions is within one unit in the last
  place, 2**-23 relative. fp32, bf16 and mixed operands give the same bits, and so does any number of threads.
- The AMX kernel (Intel's tiles, the "amx" level) adds each tile step's 32 exact products in the hardware's own
  order, which Intel does not document beyond rounding to nearest even: it is held to the float32 bound below, and
  gives the same bits for fp32, bf16 and mixed operands, for any number of threads, and for alpha (a power of two)
  as the unscaled product scaled. Its own shapes: part tiles of rows and columns, k in part steps of 32 and across
  its 512-value blocks. Skipped on a CPU without AMX-BF16.
- The emulation (any CPU) is held to the float32 summation bound against float64 on the same rounded
  operands: |c - c64| <= k * 2**-24 * sum_p |a_p b_p| (a bound any summation order meets; the bf16 rounding
  of the inputs, which a kernel that forgot to round would show, is ~2**-9 relative, far outside it).
"""
import itertools

import numpy as np
import pytest
import torch

import ctransformer as ct
from ctransformer import amp

HAS_BF16 = ct.build_info()["cpu"]["avx512_bf16"] and ct.build_info()["cpu"]["simd_level"] == "avx512"
HAS_AMX = "amx" in ct.kernel_levels()  # AMX-BF16, and Linux granted the process the tile state
AMX_SKIP = "this CPU has no AMX-BF16 (or Linux refused the tile state): the AMX kernel cannot run here"
HAS_ARM_BF16 = ct.build_info()["cpu"]["bf16"]  # aarch64's BF16 extension (make test-aarch64: qemu's max,sve256)
SHAPES = [(1, 1, 1), (1, 40, 33), (2, 300, 70), (4, 1000, 257), (5, 64, 96), (7, 33, 17), (17, 31, 258),
          (13, 64, 513), (193, 65, 300), (4097, 40, 33), (30, 600, 520), (12, 32, 256), (25, 70, 1001)]


def rounded(x):
    return amp.widen_bf16(amp.round_to_bf16(x))


def chain_reference(a, b, ta, tb, start=None):
    """The AVX512_BF16 kernel's arithmetic, in NumPy float32, from 0 or from `start` (beta = 1)."""
    A = rounded(a).T if ta else rounded(a)
    B = rounded(b).T if tb else rounded(b)
    m, k = A.shape
    acc = np.zeros((m, B.shape[1]), np.float32) if start is None else start.copy()
    for p in range(0, k, 2):
        if p + 1 < k:
            acc = acc + np.outer(A[:, p + 1], B[p + 1])  # exact products (float32), one rounding per add
        acc = acc + np.outer(A[:, p], B[p])
    return acc


def few_rows_reference(a, b, start=None, alpha=1.0):
    """The kernel's path for at most 8 rows against a transposed B (decoding), in NumPy float32: lane j of
    16 chains over the k pairs p = j mod 16, the lanes are added by halves, the sum is scaled, then added
    to `start` (beta = 1)."""
    A, B = rounded(a), rounded(b).T           # B as op(B): (k, n)
    m, k = A.shape
    lanes = np.zeros((m, B.shape[1], 16), np.float32)
    for p in range(0, k, 2):
        j = (p // 2) % 16
        if p + 1 < k:
            lanes[:, :, j] = lanes[:, :, j] + np.outer(A[:, p + 1], B[p + 1])
        lanes[:, :, j] = lanes[:, :, j] + np.outer(A[:, p], B[p])
    for half in (8, 4, 2, 1):
        lanes = lanes[:, :, :half] + lanes[:, :, half:2 * half]
    total = lanes[:, :, 0]
    if alpha != 1.0:
        total = total * np.float32(alpha)
    return total if start is None else start + total


def reference(a, b, ta, tb, start=None, alpha=1.0):
    """What the AVX512_BF16 kernel computes for these operands, by the path it takes."""
    m = a.shape[1] if ta else a.shape[0]
    if m <= 8 and not ta and tb and a.shape[-1] > 0:
        return few_rows_reference(a, b, start, alpha)
    product = chain_reference(a, b, ta, tb, start=None if alpha != 1.0 else start)
    if alpha != 1.0:
        product = product * np.float32(alpha)
        return product if start is None else start + product
    return product


def float64_reference(a, b, ta, tb):
    """The exact product of the bf16-rounded operands (float64 holds each product of two bf16 exactly, and its
    sums far below float32's error), the sum of absolute products a summation bound scales, and the exact
    product of the UNROUNDED operands (what a kernel that forgot to round would approach)."""
    A = (rounded(a).T if ta else rounded(a)).astype(np.float64)
    B = (rounded(b).T if tb else rounded(b)).astype(np.float64)
    unrounded = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    return A @ B, np.abs(A) @ np.abs(B), unrounded


def operands(m, n, k, ta, tb, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    return a, b


@pytest.fixture
def kernel():
    """Restores the automatic choice after a test that forces one."""
    yield amp.set_bf16_kernel
    amp.set_bf16_kernel("auto")


# --- rounding -----------------------------------------------------------------------------------------
def test_rounding_is_torchs():
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 3.4028235e38, -3.4028235e38, 1e-40, -1e-40, 1e-45,
                        1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-8 + 2.0**-20, 3.3961776e38, 3.3895314e38],
                       np.float32)  # ties go to even both ways; the last two round to infinity / the largest bf16
    ties = (rng.integers(0, 2**16, 5000).astype(np.uint32) << 16 | 0x8000).view(np.float32)
    x = np.concatenate([special, rng.standard_normal(20000).astype(np.float32) * 10.0**rng.integers(-40, 38, 20000),
                        ties[np.isfinite(ties)]]).astype(np.float32)
    ours = amp.round_to_bf16(x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(amp.widen_bf16(ours), torch.from_numpy(x).to(torch.bfloat16).float().numpy())


def test_nan_rounds_to_a_quiet_nan():
    x = np.array([np.nan, -np.nan, np.float32(np.uint32(0x7F800001).view(np.float32))], np.float32)
    assert (amp.round_to_bf16(x) == 0x7FC0).all()


# --- the kernels --------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512_BF16: the native kernel cannot run here")
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_native_kernel_is_exact(m, n, k, kernel):
    kernel("avx512_bf16")
    assert amp.bf16_kernel() == "avx512_bf16"
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = operands(m, n, k, ta, tb, seed=m * 7 + n + k)
        want = reference(a, b, ta, tb)
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb), want, err_msg=f"fp32 operands {ta=} {tb=}")
        ab, bb = amp.round_to_bf16(a), amp.round_to_bf16(b)
        np.testing.assert_array_equal(amp.gemm_bf16(ab, bb, ta, tb), want, err_msg=f"bf16 operands {ta=} {tb=}")
        np.testing.assert_array_equal(amp.gemm_bf16(a, bb, ta, tb), want, err_msg=f"mixed operands {ta=} {tb=}")
        c = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb, c=c), reference(a, b, ta, tb, start=c),
                                      err_msg=f"beta 1 {ta=} {tb=}")  # the chain starts from C
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb, alpha=0.125), reference(a, b, ta, tb, alpha=0.125))
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb, alpha=0.3, c=c),
                                      reference(a, b, ta, tb, start=c, alpha=0.3))


def special_operands(m, n, k, ta, tb, infinity_in):
    """operands() with a third of each operand's values on rounding's edges: subnormals, ties (1 + 2**-8 rounds
    to even, down; 1 + 3 * 2**-8 up), each also scaled by 2**-10; and one value of `infinity_in` ("a" or "b")
    that rounds to infinity."""
    rng = np.random.default_rng(m + n + k)
    special = np.array([1e-40, -1e-40, 1e-45, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -(1.0 + 2.0**-8)], np.float32)
    a, b = operands(m, n, k, ta, tb, seed=k)
    for x in (a, b):
        flat = x.reshape(-1)
        at = rng.choice(flat.size, size=flat.size // 3, replace=False)
        flat[at] = rng.choice(special, size=at.size) * rng.choice(np.float32([1, 2**-10]), size=at.size)
    x = a if infinity_in == "a" else b
    x.reshape(-1)[rng.integers(0, x.size)] = 3.3961776e38
    return a, b


X86_KERNELS = [pytest.param("avx512_bf16", marks=pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512_BF16")),
               pytest.param("amx_bf16", marks=pytest.mark.skipif(not HAS_AMX, reason=AMX_SKIP))]


@pytest.mark.parametrize("name", X86_KERNELS)
@pytest.mark.parametrize("m,n,k", [(3, 40, 70), (13, 45, 37), (30, 70, 300), (40, 33, 530)])
def test_native_kernel_rounds_fp32_operands_as_round_to_bf16(m, n, k, name, kernel):
    """fp32 operands are rounded while packed (vcvtne2ps2bf16); the products must be those of the operands
    rounded by round_to_bf16 first: ties to even, values that round to infinity, and subnormals, which the
    instruction flushes to zero as vdpbf16ps and tdpbf16ps flush subnormal bf16 inputs. (NaN operands are
    refused.)"""
    kernel(name)
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = special_operands(m, n, k, ta, tb, infinity_in="a")
        want = amp.gemm_bf16(amp.round_to_bf16(a), amp.round_to_bf16(b), ta, tb)
        assert np.isinf(want).any()  # the values that round to infinity reached the products
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb), want, err_msg=f"{ta=} {tb=}")
        np.testing.assert_array_equal(amp.gemm_bf16(a, amp.round_to_bf16(b), ta, tb), want, err_msg=f"{ta=} {tb=}")


def assert_the_same_on_one_and_two_threads(shapes, seed, num_threads):
    """The kernel in force gives the same bits on 1 and 2 threads, for x W^T of each (m, n, k) (num_threads: the
    fixture, which puts the count back)."""
    for m, n, k in shapes:
        a, b = operands(m, n, k, False, True, seed=seed)
        num_threads(1)
        one = amp.gemm_bf16(a, b, trans_b=True)
        num_threads(2)
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, trans_b=True), one, err_msg=f"{m=} {n=} {k=}")


@pytest.mark.skipif(not HAS_BF16, reason="this CPU has no AVX512_BF16: the native kernel cannot run here")
def test_native_kernel_is_the_same_on_any_number_of_threads(kernel, num_threads):
    kernel("avx512_bf16")
    assert_the_same_on_one_and_two_threads([(512, 2048, 512), (2048, 96, 300), (40, 10000, 64), (2, 8000, 256)], 3,
                                           num_threads)


def assert_one_chain_per_element(m, n, k, seed, unit, unrounded_misses_up_to):
    """The kernel in force sums each C element as one chain from 0 or from C, adding exact products in an order of
    the hardware's, each addition rounded to at most `unit` (2**-24 for float32's round to nearest, 2**-23 for
    round to odd): the bound any such order meets, k unit sum |a b|. The products are those of the bf16-rounded
    operands, whichever operands come as float32 (rounded while packed) and which as bf16; alpha scales the
    finished chain. Unrounded inputs would miss by the inputs' rounding, outside the bound, for k from 16 up to
    `unrounded_misses_up_to` (above it the bound grows loose enough to hold them)."""
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = operands(m, n, k, ta, tb, seed=seed)
        exact, size, unrounded = float64_reference(a, b, ta, tb)
        got = amp.gemm_bf16(a, b, ta, tb)
        assert (np.abs(got - exact) <= k * unit * size + 1e-30).all(), (ta, tb)
        if 16 <= k <= unrounded_misses_up_to:
            assert not (np.abs(unrounded - exact) <= k * unit * size).all()
        ab, bb = amp.round_to_bf16(a), amp.round_to_bf16(b)
        np.testing.assert_array_equal(amp.gemm_bf16(ab, bb, ta, tb), got, err_msg=f"bf16 operands {ta=} {tb=}")
        np.testing.assert_array_equal(amp.gemm_bf16(a, bb, ta, tb), got, err_msg=f"mixed operands {ta=} {tb=}")
        np.testing.assert_array_equal(amp.gemm_bf16(ab, b, ta, tb), got, err_msg=f"mixed operands {ta=} {tb=}")
        # beta 1: the chain starts from C, one more addition
        c = np.random.default_rng(1).standard_normal(got.shape).astype(np.float32)
        with_c = amp.gemm_bf16(a, b, ta, tb, c=c)
        assert (np.abs(with_c - (c + exact)) <= (k + 1) * unit * (size + np.abs(c)) + 1e-30).all(), (ta, tb)
        # alpha scales the finished chain (a power of two exactly); with beta 1 the scaled product is added to C
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb, alpha=0.125), got * np.float32(0.125))
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb, alpha=0.3, c=c), c + got * np.float32(0.3))


# The AMX kernel's own paths beside SHAPES: C in blocks of 32 x 32 of 16 x 16 tiles (rows 16, 32, 33, 47; columns
# 16, 48, 65: whole and part tiles, one or two a side), k in steps of 32 values within blocks of 512 (k 32, 512, 513,
# 1030: a block's last step part zeros), split over threads by columns (n 2304) and by rows (n 40, m 300).
AMX_SHAPES = SHAPES + [(16, 16, 32), (32, 48, 512), (33, 65, 513), (47, 16, 1030), (128, 2304, 768), (300, 40, 96)]


@pytest.mark.skipif(not HAS_AMX, reason=AMX_SKIP)
@pytest.mark.parametrize("m,n,k", AMX_SHAPES)
def test_amx_kernel_meets_the_float32_bound(m, n, k, kernel):
    """Each C element is one float32 chain over the tile steps, each step adding 32 exact products in an order of
    the hardware's. (Up to 8 rows of x W^T take the AVX512_BF16 few-rows path, exact above, and meet it too.)"""
    kernel("amx_bf16")
    assert amp.bf16_kernel() == "amx_bf16"
    assert_one_chain_per_element(m, n, k, seed=m * 3 + n + k, unit=2.0**-24, unrounded_misses_up_to=1000)


@pytest.mark.skipif(not HAS_AMX, reason=AMX_SKIP)
def test_amx_kernel_is_the_same_on_any_number_of_threads(kernel, num_threads):
    """Each C element is one chain, whichever thread's columns (or rows) it falls in."""
    kernel("amx_bf16")
    assert_the_same_on_one_and_two_threads([(512, 2048, 512), (2048, 96, 300), (40, 10000, 64), (300, 40, 1030)], 4,
                                           num_threads)


# The emulation's own paths beside SHAPES: 1-8 rows take W 4, 2 or 1 rows at a time (n = 2307, 301: 3 and 1 left
# over), k with a tail after its 8-value vectors (771, 33); above 8 rows W goes in 512 KiB blocks (k = 3072: 32 rows a
# block, n = 700 leaves a partial block; 130 rows split over threads).
EMULATION_SHAPES = SHAPES + [(1, 2307, 771), (2, 301, 33), (3, 301, 768), (4, 130, 64), (6, 70, 3072), (8, 9, 7),
                             (130, 700, 3072), (9, 2304, 768)]


@pytest.mark.parametrize("m,n,k", EMULATION_SHAPES)
def test_emulation_meets_the_float32_bound(m, n, k, kernel):
    kernel("emulated")
    assert amp.bf16_kernel() == "emulated"
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = operands(m, n, k, ta, tb, seed=m + n * 3 + k)
        exact, size, unrounded = float64_reference(a, b, ta, tb)
        got = amp.gemm_bf16(a, b, ta, tb)
        assert (np.abs(got - exact) <= k * 2.0**-24 * size + 1e-30).all(), (ta, tb)
        # unrounded inputs would miss by the inputs' rounding, outside the bound: ~2**-9 |a b| / sqrt(k) against
        # k 2**-24 |a b|, so from 16 to ~1000 terms (at k = 3072 the bound is loose enough to hold them)
        if 16 <= k <= 1000:
            assert not (np.abs(unrounded - exact) <= k * 2.0**-24 * size).all()
        # B as a weight's bf16 copy (decoding's x W^T widens it in registers up to 8 rows, in blocks above), and
        # beta 1 with alpha != 1 (C + alpha P: k + 1 terms, alpha a power of two so it adds no rounding)
        bb = amp.round_to_bf16(b)
        got16 = amp.gemm_bf16(a, bb, ta, tb)
        assert (np.abs(got16 - exact) <= k * 2.0**-24 * size + 1e-30).all(), ("bf16 b", ta, tb)
        c = np.random.default_rng(2).standard_normal(exact.shape).astype(np.float32)
        with_c = amp.gemm_bf16(a, bb, ta, tb, alpha=0.5, c=c)
        assert (np.abs(with_c - (c + 0.5 * exact)) <= (k + 1) * 2.0**-24 * (np.abs(c) + 0.5 * size) + 1e-30).all(), \
            ("beta 1", ta, tb)


@pytest.mark.parametrize("m,n,k", [(1, 45, 37), (3, 40, 70), (13, 45, 37), (30, 70, 300)])
def test_emulation_rounds_fp32_operands_as_round_to_bf16(m, n, k, kernel):
    """The emulation rounds a float32 B where it reads it (in registers up to 8 rows: attention's keys): ties to
    even, values that round to infinity, subnormals. The same operands rounded by round_to_bf16 first take the same
    path, so the bits must agree, infinities included."""
    kernel("emulated")
    for ta, tb in itertools.product([False, True], repeat=2):
        a, b = special_operands(m, n, k, ta, tb, infinity_in="b")
        want = amp.gemm_bf16(amp.round_to_bf16(a), amp.round_to_bf16(b), ta, tb)
        assert np.isinf(want).any()
        np.testing.assert_array_equal(amp.gemm_bf16(a, b, ta, tb), want, err_msg=f"{ta=} {tb=}")


ARM_SKIP = "this CPU has no ARM BF16: the aarch64 kernel cannot run here (make test-aarch64 runs it under qemu)"


@pytest.mark.skipif(not HAS_ARM_BF16, reason=ARM_SKIP)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_arm_kernel_meets_the_round_to_odd_bound(m, n, k, kernel):
    """BFDOT adds in round to odd (FPCR.EBF clear): each addition errs by up to one unit in the last place, 2**-23,
    twice float32's round to nearest."""
    kernel("neon_bf16")
    assert amp.bf16_kernel() == "neon_bf16"
    assert_one_chain_per_element(m, n, k, seed=m * 5 + n + k, unit=2.0**-23, unrounded_misses_up_to=float("inf"))


@pytest.mark.skipif(not HAS_ARM_BF16, reason=ARM_SKIP)
def test_arm_kernel_is_the_same_on_any_number_of_threads(kernel, num_threads):
    """Each C element is one chain, whichever thread's columns it falls in (sizes above the split's threshold,
    small enough for an emulated CPU)."""
    kernel("neon_bf16")
    assert_the_same_on_one_and_two_threads([(64, 512, 130), (2, 3000, 256), (300, 70, 64)], 5, num_threads)


def test_kernel_names_and_refusals(kernel):
    assert amp.bf16_kernel() == ("amx_bf16" if HAS_AMX else "avx512_bf16" if HAS_BF16 else "neon_bf16" if HAS_ARM_BF16
                                 else "emulated")
    with pytest.raises(ValueError, match="'auto', 'amx_bf16', 'avx512_bf16', 'neon_bf16' or 'emulated'"):
        kernel("amx")
    if not HAS_AMX:
        with pytest.raises(ValueError, match="no AMX-BF16"):
            kernel("amx_bf16")
    if not HAS_BF16:
        with pytest.raises(ValueError, match="no AVX512_BF16"):
            kernel("avx512_bf16")
    if not HAS_ARM_BF16:
        with pytest.raises(ValueError, match="no ARM BF16"):
            kernel("neon_bf16")


def test_bad_operands_are_refused():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="inner sizes must agree"):
        amp.gemm_bf16(a, np.ones((5, 2), np.float32))
    with pytest.raises(ValueError, match="a: expected a 2-D array"):
        amp.gemm_bf16(np.ones(3, np.float32), a)
    with pytest.raises(TypeError, match="b: expected float32 values or uint16 bf16 bits, got dtype int64"):
        amp.gemm_bf16(a, np.ones((4, 2), np.int64))
    with pytest.raises(ValueError, match="a: contains NaN"):
        amp.gemm_bf16(np.full((3, 4), np.nan, np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match=r"c: expected a float32 array of shape \(3, 2\)"):
        amp.gemm_bf16(a, np.ones((4, 2), np.float32), c=np.ones((2, 2), np.float32))
