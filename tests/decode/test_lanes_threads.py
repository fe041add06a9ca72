"""search_batches' lanes under threads, for ThreadSanitizer too (scripts/sanitize.sh runs this file without torch or
the conftest): two threads take the batches, the float32 weights packed once in the caller's cache and read by both
lanes (kernels/weight_cache.hpp, SharedPacking)."""
import numpy as np
import pytest

import ctransformer as ct

pytestmark = pytest.mark.threads   # threads, the serving engine or the server: make test-stress runs it under load

PAD, START, END = 1, 2, 4


def model_and_batches(seed):
    ct.manual_seed(seed)
    model = ct.nn.Transformer(41, 41, PAD, PAD, d_word_vec=32, d_model=32, d_inner=64, n_layers=2, n_head=4,
                              d_k=8, d_v=8).eval()
    rng = np.random.default_rng(seed)
    batches = []
    for b in (4, 5, 3, 6, 4):
        src = rng.integers(5, 41, (b, int(rng.integers(3, 9))))
        src[0, -2:] = PAD
        batches.append((src, ct.nn.get_pad_mask(src, PAD), 10))
    return model, batches


def search(model, batches, lanes):
    return [(ids.copy(), scores.copy())
            for ids, scores in ct.decode.search_batches(model, batches, START, END, 2, 0.6, lanes=lanes)]


def test_lanes_share_the_packed_weights_and_repeat_exactly(num_threads):
    num_threads(2)
    model, batches = model_and_batches(0)
    assert ct.decode.runs_in_lanes(len(batches))
    with ct.decode.PackedWeights():   # as the Translator holds one: the lanes' copies stay across calls
        search(model, batches, True)   # packs each decoder weight on its second product (the first, BLAS's)
        packed = ct.decode.PackedWeights.count
        first = search(model, batches, True)
        again = search(model, batches, True)
    # (at a kernel level without the packed kernel, as x86-64's, the region packs nothing)
    packing = next(row["kernel"] for row in ct._core._kernel_table(None) if row["key"] == "packed")
    if packing != "(not packed)":
        assert packed > 0, "the decoder's weights should be packed, once, in this thread's cache"
    else:
        assert packed == 0
    for (a, s), (b, t) in zip(first, again):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(s, t)
    # int8: in lanes or split product by product, bit for bit
    q = ct.quantize_dynamic(model)
    for (a, s), (b, t) in zip(search(q, batches, True), search(q, batches, False)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(s, t)
