#include "ctransformer/ops/linear.hpp"

#include <algorithm>

#include "../blas.hpp"
#include "../kernels/fp32/few_rows.hpp"
#include "../kernels/dispatch.hpp"
#include "../kernels/split.hpp"
#include "../kernels/weight_cache.hpp"
#include "../runtime/parallel.hpp"
#include "ctransformer/autocast.hpp"
#include "ctransformer/bf16.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/runtime/allocator.hpp"

namespace ct {

namespace {

// x is viewed as (N, in) with N = all leading dimensions; one gemm each way. With y = alpha x W^T + b:
// dx = alpha g W, dW = alpha g^T x, db = sum over rows of g. Under autocast (bf16) the products
// round their operands to bf16 and accumulate in fp32, forward and backward alike.
struct LinearBackward : Node {
    std::size_t rows, in, out;
    bool has_bias;
    float alpha;
    bool bf16;
    LinearBackward(std::size_t r, std::size_t i, std::size_t o, bool b, float a, bool h)
        : rows(r), in(i), out(o), has_bias(b), alpha(a), bf16(h) {}
    const char* name() const override { return "linear"; }
    void backward(const Array& g) override {
        const Tensor& x = inputs[0];
        const Tensor& w = inputs[1];
        const int N = int(rows), I = int(in), O = int(out);
        if (GradBuffer gx = grad_buffer(x)) {  // dx (N, in) = g (N, out) @ W (out, in)
            if (O == 0 && !gx.accumulate) std::fill_n(gx.data, x.numel(), 0.0f);
            if (bf16)
                gemm_bf16(N, I, O, alpha, Bf16Operand::fp32(g.data(), O), weight_cache::bf16_operand(w, I, false, false), gx.beta(),
                          gx.data, I);
            else
                blas::gemm(false, false, N, I, O, alpha, g.data(), O, w.data(), I, gx.beta(), gx.data, I);
        }
        if (GradBuffer gw = grad_buffer(w)) {  // dW (out, in) = g^T @ x
            if (N == 0 && !gw.accumulate) std::fill_n(gw.data, w.numel(), 0.0f);
            if (bf16)
                gemm_bf16(O, I, N, alpha, Bf16Operand::fp32(g.data(), O, true), Bf16Operand::fp32(x.data(), I),
                          gw.beta(), gw.data, I);
            else
                blas::gemm(true, false, O, I, N, alpha, g.data(), O, x.data(), I, gw.beta(), gw.data, I);
        }
        if (has_bias)
            if (GradBuffer gb = grad_buffer(inputs[2])) {  // db = sum over rows of g, columns split over threads
                const float* pg = g.data();
                parallel::parallel_for(out, std::max<std::size_t>(16, 32768 / std::max<std::size_t>(rows, 1)),
                                       [&](std::size_t o0, std::size_t o1) {
                    float* db = gb.data;
                    if (!gb.accumulate) std::fill(db + o0, db + o1, 0.0f);
                    for (std::size_t r = 0; r < rows; ++r)
                        for (std::size_t o = o0; o < o1; ++o) db[o] += pg[r * out + o];
                });
            }
    }
};

// x (..., in_f) and bias (out_f,) checked; returns the rows x W^T has (the leading dimensions' product, not
// numel / in_features: with in_features = 0 that would be 0 rows, the bias never copied and the output left
// uninitialised) and sets y's shape.
std::size_t linear_rows(const Tensor& x, std::size_t in_f, std::size_t out_f, const Tensor* bias, Shape& out_shape) {
    if (x.dim() < 1 || x.size(-1) != in_f)
        throw ValueError("linear: input's last dimension must be in_features = " + std::to_string(in_f) +
                         ", got input shape " + shape_str(x.shape()));
    if (bias && (bias->dim() != 1 || bias->size(0) != out_f))
        throw ValueError("linear: bias must have shape (" + std::to_string(out_f) + ",), got " +
                         shape_str(bias->shape()));
    out_shape = x.shape();
    out_shape.back() = out_f;
    std::size_t rows = 1;
    for (std::size_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
    return rows;
}

// y (rows, out) = alpha x W^T (+ y when accumulate) through W's copy packed for this PackedWeights region
// (kernels/weight_cache.hpp); threads claim pieces of whole panels of 64 outputs (kernels/split.hpp), and products
// under 2^20 multiply-adds stay on one thread (as linear_int8's).
void packed_product(std::size_t rows, const float* x, std::size_t in_f, const blas::PackedWeight& w, float alpha,
                    bool accumulate, float* y, std::size_t out_f) {
    const auto run = [&](std::size_t c0, std::size_t c1) {
        blas::packed_gemm(int(rows), x, int(in_f), w, alpha, accumulate, y, int(out_f), int(c0), int(c1));
    };
    // Few rows are bound by reading the weight, so two threads pay from 2^16 weights on (as sgemv's split).
    if (rows * in_f * out_f < (std::size_t(1) << 20) && in_f * out_f < (std::size_t(1) << 16)) return run(0, out_f);
    parallel::parallel_for((out_f + 63) / 64, 1, [&](std::size_t a, std::size_t b) {
        run(a * 64, std::min(out_f, b * 64));
    }, kernels::kPackedPiecesPerThread);
}

// out[i] = x[i] rounded to bf16 and widened back (as to_bf16: to nearest, ties to even, NaN kept).
void round_rows_to_bf16(const float* x, float* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = from_bf16(to_bf16(x[i]));
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias) { return linear(x, weight, bias, 1.0f); }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias, float alpha) {
    if (weight.dim() != 2)
        throw ValueError("linear: weight must have rank 2 (out_features, in_features), got shape " +
                         shape_str(weight.shape()));
    const std::size_t out_f = weight.size(0), in_f = weight.size(1);
    Shape out_shape;
    const std::size_t rows = linear_rows(x, in_f, out_f, bias, out_shape);
    Tensor out(Array::from_shape(out_shape));
    float* y = out.data();
    if (bias) {  // start from the bias and let gemm add x W^T (beta = 1)
        const float* pb = bias->data();
        parallel::parallel_for(rows, std::max<std::size_t>(1, 32768 / std::max<std::size_t>(out_f, 1)),
                               [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) std::copy_n(pb, out_f, y + r * out_f);
        });
    } else if (in_f == 0) {
        out.array().fill(0.0f);
    }
    const bool bf16 = autocast::enabled();
    const bool grad = needs_grad({&x, &weight, bias});
    // Decoding's products of 3 to 1024 rows: the weight packed once per PackedWeights region, not per product. Under
    // autocast where bf16 is emulated (a float32 product of bf16-rounded operands) the packed copy is of the rounded
    // weight, and x is rounded first: the same product as the emulation's, and at a batch's rows the packed kernel
    // is what float32 runs (the emulation widens W a block at a time into an sgemm, which packs it again).
    const bool emulated = bf16 && kernels::bf16_kernel() == kernels::Bf16Kernel::Emulated;
    const blas::PackedWeight* packed = (!bf16 || emulated) && !grad && in_f > 0 &&
                                               rows >= std::size_t(blas::kPackedMinRows) &&
                                               rows <= std::size_t(blas::kPackedMaxRows)
                                           ? weight_cache::packed(weight, bf16)
                                           : nullptr;
    if ((!bf16 || emulated) && !grad && in_f > 0 && rows > std::size_t(blas::kPackedMaxRows))
        weight_cache::note_product(weight, bf16);
    if (packed && bf16) {
        CachedArray<float> rounded = cached_array<float>(rows * in_f);
        round_rows_to_bf16(x.data(), rounded.get(), rows * in_f);
        packed_product(rows, rounded.get(), in_f, *packed, alpha, bias != nullptr, y, out_f);
    } else if (in_f > 0 && bf16) {  // an empty product adds nothing: y is already the bias (or zeros)
        gemm_bf16(int(rows), int(out_f), int(in_f), alpha, Bf16Operand::fp32(x.data(), int(in_f)),
                  weight_cache::bf16_operand(weight, int(in_f), true, !grad), bias ? 1.0f : 0.0f, y, int(out_f));
    } else if (packed)
        packed_product(rows, x.data(), in_f, *packed, alpha, bias != nullptr, y, out_f);
    else if (in_f > 0)
        blas::gemm(false, true, int(rows), int(out_f), int(in_f), alpha, x.data(), int(in_f), weight.data(),
                   int(in_f), bias ? 1.0f : 0.0f, y, int(out_f));
    if (grad)
        attach(out, std::make_shared<LinearBackward>(rows, in_f, out_f, bias != nullptr, alpha, bf16),
               {&x, &weight, bias});
    return out;
}

namespace {

// An int8 product has no gradient, as torch's dynamically quantised Linear has none. Its output keeps no
// graph of what fed it (nothing upstream is retained), and a backward that reaches it raises: without this
// node, x + linear_int8(x) would backward through the residual alone and leave the weights' gradients
// silently missing.
struct Int8LinearBackward : Node {
    const char* name() const override { return "Int8LinearBackward"; }
    void backward(const Array&) override {
        throw ValueError("backward: this Linear is quantised to int8 and has no gradient (as torch's dynamically "
                         "quantised Linear): call dequantize() on the model to train it");
    }
};

}  // namespace

Tensor linear_int8(const Tensor& x, const Int8Weight& weight, const Tensor* bias, float alpha,
                   const Tensor* float_weight) {
    const std::size_t out_f = weight.out_features, in_f = weight.in_features;
    Shape out_shape;
    const std::size_t rows = linear_rows(x, in_f, out_f, bias, out_shape);
    Tensor out(Array::from_shape(out_shape));
    if (in_f == 0) {  // an empty product: the bias, or zeros
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t o = 0; o < out_f; ++o) out.data()[r * out_f + o] = bias ? bias->data()[o] : 0.0f;
    } else {
        linear_int8(rows, x.data(), in_f, weight, alpha, bias ? bias->data() : nullptr, out.data(), out_f);
    }
    if (needs_grad({&x, bias, float_weight})) attach(out, std::make_shared<Int8LinearBackward>(), {});
    return out;
}

}  // namespace ct
