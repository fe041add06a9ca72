// ctransformer._core.functional: NumPy-facing signatures over the core's ops. Argument
// conversion happens with the GIL held; the maths runs with it released.
#include <pybind11/stl.h>

#include <cmath>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/ops.hpp"

namespace ctpy {

using ct::Tensor;
using release_gil = py::call_guard<py::gil_scoped_release>;

namespace {

const Tensor* optional_tensor(const py::object& obj, Tensor& storage, const char* arg) {
    if (obj.is_none()) return nullptr;
    storage = as_tensor(obj, arg);
    return &storage;
}

}  // namespace

void bind_functional(py::module_& f) {
    f.def("matmul", [](const Tensor& a, const Tensor& b) { return ct::matmul(a, b); }, py::arg("input"),
          py::arg("other"), release_gil(), "input @ other for rank >= 2 operands; batch dimensions broadcast.");
    f.def("linear", [](const Tensor& x, const Tensor& w, py::object b) {
        Tensor bias;
        const Tensor* pb = optional_tensor(b, bias, "bias");
        py::gil_scoped_release release;
        return ct::linear(x, w, pb);
    }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), "input @ weight.T + bias.");
    f.def("add", [](const Tensor& a, py::object b) { return ct::add(a, as_tensor(b, "other")); }, py::arg("input"), py::arg("other"),
          "input + other, broadcasting as NumPy does; other may be a Tensor, an array or a number.");
    f.def("sub", [](const Tensor& a, py::object b) { return ct::sub(a, as_tensor(b, "other")); }, py::arg("input"), py::arg("other"),
          "input - other, broadcasting as NumPy does.");
    f.def("mul", [](const Tensor& a, py::object b) { return ct::mul(a, as_tensor(b, "other")); }, py::arg("input"), py::arg("other"),
          "input * other element by element, broadcasting as NumPy does.");
    f.def("div", [](const Tensor& a, py::object b) { return ct::div(a, as_tensor(b, "other")); }, py::arg("input"), py::arg("other"),
          "input / other element by element, broadcasting as NumPy does.");
    f.def("scale", &ct::scale, py::arg("input"), py::arg("factor"), release_gil(), "input * factor for a Python number.");
    f.def("relu", &ct::relu, py::arg("input"), release_gil(), "max(input, 0); its gradient is 0 where input <= 0.");
    f.def("gelu", &ct::gelu, py::arg("input"), release_gil(),
          "GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).");
    f.def("gelu_erf", &ct::gelu_erf, py::arg("input"), release_gil(),
          "GELU, the exact form (torch's F.gelu default): 0.5 x (1 + erf(x / sqrt(2))).");
    f.def("silu", &ct::silu, py::arg("input"), release_gil(), "SiLU (swish): x * sigmoid(x).");
    f.def("dropout", &ct::dropout, py::arg("input"), py::arg("p") = 0.5f, py::arg("training") = true, release_gil(),
          "Zero each element with probability p and scale the rest by 1 / (1 - p) while training; input unchanged "
          "otherwise. The mask comes from the library's generator (ct.manual_seed).");
    f.def("softmax", [](const Tensor& x, py::object dim) {
        const std::int64_t d = to_dim(dim, x.dim(), "softmax: dim");
        py::gil_scoped_release release;
        return ct::softmax(x, d);
    }, py::arg("input"), py::arg("dim"), "exp(input) / sum(exp(input)) along dim, computed from the row's maximum.");
    f.def("log_softmax", [](const Tensor& x, py::object dim) {
        const std::int64_t d = to_dim(dim, x.dim(), "log_softmax: dim");
        py::gil_scoped_release release;
        return ct::log_softmax(x, d);
    }, py::arg("input"), py::arg("dim"), "input - log(sum(exp(input))) along dim: log-probabilities, without overflow.");
    f.def("layer_norm", [](const Tensor& x, py::object w, py::object b, float eps) {
        Tensor weight, bias;
        const Tensor* pw = optional_tensor(w, weight, "weight");
        const Tensor* pb = optional_tensor(b, bias, "bias");
        py::gil_scoped_release release;
        return ct::layer_norm(x, pw, pb, eps);
    }, py::arg("input"), py::arg("weight") = py::none(), py::arg("bias") = py::none(), py::arg("eps") = 1e-5,
       "Normalise over the last dimension, then scale by weight and shift by bias.");
    f.def("embedding", [](py::object ids, const Tensor& weight, py::object padding_idx) {
        ct::IndexArray idx = to_index_array(ids, "input");
        std::optional<std::int64_t> pad;
        if (!padding_idx.is_none()) pad = to_int(padding_idx, "padding_idx");
        py::gil_scoped_release release;
        return ct::embedding(idx, weight, pad);
    }, py::arg("input"), py::arg("weight"), py::arg("padding_idx") = py::none(),
       "Rows of weight for the integer ids in input; no gradient reaches the padding_idx row.");
    f.def("masked_fill", [](const Tensor& x, py::object mask, float value) {
        ct::Mask m = to_mask(mask, "mask");
        py::gil_scoped_release release;
        return ct::masked_fill(x, m, value);
    }, py::arg("input"), py::arg("mask"), py::arg("value"), "value where mask is True, input elsewhere.");
    f.def("scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v, py::object mask,
                                             float dropout_p, float fill_value) {
        ct::Mask m;
        const bool has_mask = !mask.is_none();
        if (has_mask) m = to_mask(mask, "mask");
        py::gil_scoped_release release;
        return ct::scaled_dot_product_attention(q, k, v, has_mask ? &m : nullptr, dropout_p, fill_value, true);
    }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none(), py::arg("dropout_p") = 0.0f,
       py::arg("fill_value") = -1e9f,
       "Returns (output, attention_weights). mask is True where a query may attend to a key; it broadcasts to "
       "(..., Lq, Lk), e.g. from (b, 1, Lk) or (b, 1, Lq, Lk).");
    f.def("multi_head_attention", [](const Tensor& q, const Tensor& k, const Tensor& v, ctpy::Int n_head_obj,
                                     py::object scale, py::object mask, float fill_value, bool causal, float dropout_p,
                                     bool training, py::object kv_length) {
        ct::Mask m;
        ct::AttentionConfig c;
        const auto n_head = std::size_t(to_int_at_least(n_head_obj, "multi_head_attention: n_head", 1));
        c.n_head = n_head;
        c.scale = scale.is_none() ? 1.0f / std::sqrt(float(q.size(-1) / n_head)) : scale.cast<float>();
        if (!mask.is_none()) {
            m = to_mask(mask, "mask");
            c.mask = &m;
        }
        c.fill_value = fill_value;
        c.causal = causal;
        c.dropout_p = dropout_p;
        c.training = training;
        if (!kv_length.is_none()) {
            const auto n = to_int_at_least(kv_length, "multi_head_attention: kv_length", 1);
            c.kv_length = std::size_t(n);
        }
        py::gil_scoped_release release;
        return ct::multi_head_attention(q, k, v, c);
    }, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("n_head"), py::arg("scale") = py::none(),
       py::arg("mask") = py::none(), py::arg("fill_value") = -1e9f, py::arg("causal") = false,
       py::arg("dropout_p") = 0.0f, py::arg("training") = true, py::arg("kv_length") = py::none(),
       "Attention over heads interleaved in the last dimension: q (b, Lq, n_head*d_k), k (b, Lk, n_head*d_k), "
       "v (b, Lk, n_head*d_v), as projections produce them (no split/merge copies). scale defaults to d_k**-0.5; "
       "mask (True = may attend) broadcasts to (b, n_head, Lq, Lk); causal also masks keys after each query. "
       "kv_length reads only the first kv_length positions of k and v (Lk = kv_length; a decoding cache with "
       "room to grow; no gradient for k and v then). "
       "Returns (output (b, Lq, n_head*d_v), attention_weights (b, n_head, Lq, Lk)).");
    f.def("reshape", [](const Tensor& x, py::object shape) {
        const std::vector<std::int64_t> s = to_sizes(shape, "reshape: shape");
        py::gil_scoped_release release;
        return ct::reshape(x, s);
    }, py::arg("input"), py::arg("shape"), "The same elements in another shape; one size may be -1 (inferred).");
    f.def("transpose", [](const Tensor& x, ctpy::Int dim0, ctpy::Int dim1) {
        const std::int64_t a = to_dim(dim0, x.dim(), "transpose: dim0"), b = to_dim(dim1, x.dim(), "transpose: dim1");
        py::gil_scoped_release release;
        return ct::transpose(x, a, b);
    }, py::arg("input"), py::arg("dim0"), py::arg("dim1"), "input with dimensions dim0 and dim1 swapped.");
    f.def("permute", [](const Tensor& x, py::object dims) {
        const std::vector<std::int64_t> d = to_dims(dims, x.dim(), "permute: dims");
        py::gil_scoped_release release;
        return ct::permute(x, d);
    }, py::arg("input"), py::arg("dims"), "input with its dimensions in the order dims gives.");
    f.def("sum", [](const Tensor& x, py::object dim, bool keepdim) {
        return dim.is_none() ? ct::sum(x) : ct::sum(x, to_dim(dim, x.dim(), "sum: dim"), keepdim);
    }, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false,
       "The sum of every element (dim None), or along dim, keeping it as size 1 when keepdim.");
    f.def("mean", [](const Tensor& x, py::object dim, bool keepdim) {
        return dim.is_none() ? ct::mean(x) : ct::mean(x, to_dim(dim, x.dim(), "mean: dim"), keepdim);
    }, py::arg("input"), py::arg("dim") = py::none(), py::arg("keepdim") = false,
       "The mean of every element (dim None), or along dim, keeping it as size 1 when keepdim.");
    f.def("cross_entropy", [](const Tensor& logits, py::object target, ctpy::Int ignore_index_obj,
                              const std::string& reduction, float label_smoothing) {
        const std::int64_t ignore_index = to_int(ignore_index_obj, "cross_entropy: ignore_index");
        ct::IndexArray t = to_index_array(target, "target");
        const ct::Reduction r = ct::parse_reduction(reduction, "cross_entropy", false);
        py::gil_scoped_release release;
        return ct::cross_entropy(logits, t, ignore_index, r, label_smoothing);
    }, py::arg("input"), py::arg("target"), py::arg("ignore_index") = -100, py::arg("reduction") = "mean",
       py::arg("label_smoothing") = 0.0f, "Cross-entropy of (N, C) logits against (N,) integer targets.");
    f.def("kl_div", [](const Tensor& log_probs, py::object target, const std::string& reduction) {
        Tensor t = as_tensor(target, "target");
        const ct::Reduction r = ct::parse_reduction(reduction, "kl_div", true);
        py::gil_scoped_release release;
        return ct::kl_div(log_probs, t, r);
    }, py::arg("input"), py::arg("target"), py::arg("reduction") = "mean",
       "KL divergence of log-probabilities `input` from probabilities `target`.");
}

}  // namespace ctpy
