// ctransformer.nn.gpt: the decoder-only GPT and its parts (SelfAttention, FFN,
// TransformerLayer), named as in the GPT reference so they sit apart from the encoder-decoder's modules.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "convert.hpp"
#include "interrupt.hpp"
#include "ctransformer/decode/gpt_generate.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/nn/gpt/gpt.hpp"

namespace ctpy {

using ct::Tensor;
using namespace ct::nn;
using namespace ct::nn::gpt;
using release_gil = py::call_guard<py::gil_scoped_release>;

namespace {

// A GPT size given by its Transformer name (n_layers, ...) or by the blog post's (num_layer, ...), which warns.
std::size_t gpt_size(py::object value, const char* name, const py::object& seed_value, const char* seed_name) {
    const bool seeds = !seed_value.is_none();
    if (seeds) {
        if (!value.is_none())
            throw ct::TypeError(std::string("GPT: got both ") + name + " and " + seed_name + ", the older name for it");
        const std::string message = std::string("GPT: ") + seed_name + " is the older name for " + name +
                                    "; pass " + name + " (the Transformer's name)";
        if (PyErr_WarnEx(PyExc_FutureWarning, message.c_str(), 1) != 0) throw py::error_already_set();
        value = seed_value;
    }
    if (value.is_none()) throw ct::TypeError(std::string("GPT: missing the argument ") + name);
    return to_size(value, std::string("GPT: ") + (seeds ? seed_name : name));   // the name the caller used
}

py::tuple gpt_forward(const GPT& model, py::object word_idx, py::object targets) {
    const ct::IndexArray idx = to_index_array(word_idx, "word_idx");
    std::optional<ct::IndexArray> tgt;
    if (!targets.is_none()) tgt = to_index_array(targets, "targets");
    GPT::Output out;
    {
        py::gil_scoped_release release;
        out = model.forward(idx, tgt ? &*tgt : nullptr);
    }
    // As the blog post's GPT: (logits, loss) with targets, else (logits, [attention weights of each layer]).
    if (out.loss) return py::make_tuple(out.logits, *out.loss);
    py::list weights;
    for (const auto& w : out.attention_weights) weights.append(w);
    return py::make_tuple(out.logits, weights);
}

}  // namespace

void bind_nn_gpt(py::module_& nn) {
    auto gpt = nn.def_submodule("gpt", "The decoder-only GPT and its parts.");

    py::class_<SelfAttention, Module, std::shared_ptr<SelfAttention>>(gpt, "SelfAttention",
        "Causal multi-head self-attention: q_layer, k_layer, v_layer, proj_layer, attn_drop, proj_drop.")
        .def(py::init([](ctpy::Int embed_dim, ctpy::Int num_head, float dropout) {
            const std::size_t e = to_size(embed_dim, "SelfAttention: embed_dim"), h = to_size(num_head, "SelfAttention: num_head");
            return std::make_shared<SelfAttention>(e, h, dropout);
        }), py::arg("embed_dim"), py::arg("num_head"), py::arg("dropout"))
        .def("forward", [](const SelfAttention& m, const Tensor& x) { return m.forward(x); }, py::arg("x"), release_gil(),
             "x (batch, seq_len, embed_dim) -> (out, attn (batch, num_head, seq_len, seq_len)).")
        .def_readonly("q_layer", &SelfAttention::q_layer)
        .def_readonly("k_layer", &SelfAttention::k_layer)
        .def_readonly("v_layer", &SelfAttention::v_layer)
        .def_readonly("proj_layer", &SelfAttention::proj_layer)
        .def_readonly("attn_drop", &SelfAttention::attn_drop)
        .def_readonly("proj_drop", &SelfAttention::proj_drop)
        .def_readonly("num_head", &SelfAttention::num_head)
        .def_readonly("head_dim", &SelfAttention::head_dim);

    py::class_<FFN, Module, std::shared_ptr<FFN>>(gpt, "FFN", "drop(fc2(gelu_tanh(fc1(x)))), the GPT's feed-forward.")
        .def(py::init([](ctpy::Int embed_dim, ctpy::Int feedforward_dim, float dropout) {
            const std::size_t e = to_size(embed_dim, "FFN: embed_dim"), f = to_size(feedforward_dim, "FFN: feedforward_dim");
            return std::make_shared<FFN>(e, f, dropout);
        }), py::arg("embed_dim"), py::arg("feedforward_dim"), py::arg("dropout"))
        .def("forward", &FFN::forward, py::arg("x"), release_gil())
        .def_readonly("fc1", &FFN::fc1)
        .def_readonly("fc2", &FFN::fc2)
        .def_readonly("drop", &FFN::drop);

    py::class_<TransformerLayer, Module, std::shared_ptr<TransformerLayer>>(gpt, "TransformerLayer",
        "The GPT's pre-norm block: x + attn(norm1(x)), then + ffn(norm2(.)); no residuals when no_res.")
        .def(py::init([](ctpy::Int embed_dim, ctpy::Int num_head, ctpy::Int feedforward_dim, float dropout, bool no_res) {
            const std::size_t e = to_size(embed_dim, "TransformerLayer: embed_dim"),
                              h = to_size(num_head, "TransformerLayer: num_head"),
                              f = to_size(feedforward_dim, "TransformerLayer: feedforward_dim");
            return std::make_shared<TransformerLayer>(e, h, f, dropout, no_res);
        }), py::arg("embed_dim"), py::arg("num_head"),
             py::arg("feedforward_dim"), py::arg("dropout"), py::arg("no_res") = false)
        .def("forward", [](const TransformerLayer& m, const Tensor& x) { return m.forward(x); }, py::arg("x"),
             release_gil(), "x -> (out, attn).")
        .def_property_readonly("norm1", &TransformerLayer::norm1)
        .def_property_readonly("attn", &TransformerLayer::attn)
        .def_property_readonly("norm2", &TransformerLayer::norm2)
        .def_property_readonly("ffn", &TransformerLayer::ffn)
        .def_property_readonly("no_res", &TransformerLayer::no_res);

    using LayerList = ModuleList<TransformerLayer>;
    py::class_<LayerList, Module, std::shared_ptr<LayerList>>(gpt, "TransformerLayerList",
        "GPT.transformer: a ModuleList of TransformerLayer.")
        .def("__len__", &LayerList::size)
        .def("__getitem__", [](const LayerList& l, py::object index) {
            // Beyond 64 bits is out of range like any other index.
            int overflow = 0;
            const long long i = PyIndex_Check(index.ptr()) ? PyLong_AsLongLongAndOverflow(py::int_(index).ptr(), &overflow) : 0;
            if (!PyIndex_Check(index.ptr()))
                throw ct::TypeError("transformer: indices must be integers, got " + py::str(py::type::of(index)).cast<std::string>());
            if (overflow != 0)
                throw ct::IndexError("transformer: index " + py::str(index).cast<std::string>() + " out of range for " +
                                     std::to_string(l.size()) + " layers");
            const auto n = std::int64_t(l.size());
            if (i < -n || i >= n) throw ct::IndexError("transformer: index " + std::to_string(i) + " out of range for " +
                                                       std::to_string(n) + " layers");
            return l.items()[std::size_t(i < 0 ? i + n : i)];
        }, py::arg("index"))
        .def("__iter__", [](const LayerList& l) { return py::iter(py::cast(l.items())); });

    py::class_<GPT, Module, std::shared_ptr<GPT>>(gpt, "GPT", R"doc(The decoder-only GPT (nanoGPT-style, as in the blog post that annotates it).

GPT(vocab_size, max_seq_len, n_layers, d_model, n_head, d_inner, dropout=0.0, no_res=False, no_pos=False, *,
    layer_norm_epsilon=1e-5, activation_function="gelu_new", scale_attn_weights=True,
    scale_attn_by_inverse_layer_idx=False, tie_word_embeddings=True)

The sizes take the Transformer's names; the blog post's (num_layer, embed_dim, num_head, feedforward_dim) are
accepted as keywords and warn (FutureWarning). Token + learned position embeddings, dropout, ``n_layers``
pre-norm TransformerLayers, a final LayerNorm and a bias-free ``language_model_head`` whose weight is the
token embedding's weight. Weights ~ N(0, 0.02), biases 0, attention output projections
~ N(0, 0.02 / sqrt(2 n_layers)), drawn from the generator seeded by ``ctransformer.manual_seed``.

The keywords are GPT-2's variants, under GPT2Config's names, each defaulting to the seed's (and GPT-2's) choice:
every LayerNorm's eps; the feed-forward's activation ('gelu_new' or 'gelu_pytorch_tanh': the tanh GELU; 'gelu':
the exact one; 'relu'; 'silu' or 'swish'); the scores divided by sqrt(head size) or not, and by the layer's
index + 1 or not; a head with a weight of its own (tie_word_embeddings=False).)doc")
        .def(py::init([](ctpy::Int vocab_size, ctpy::Int max_seq_len, py::object n_layers, py::object d_model,
                         py::object n_head, py::object d_inner, py::object dropout, bool no_res, bool no_pos,
                         py::object num_layer, py::object embed_dim, py::object num_head, py::object feedforward_dim,
                         double layer_norm_epsilon, const std::string& activation_function, bool scale_attn_weights,
                         bool scale_attn_by_inverse_layer_idx, bool tie_word_embeddings) {
                 const std::size_t v = to_size(vocab_size, "GPT: vocab_size");
                 const std::size_t t = to_size(max_seq_len, "GPT: max_seq_len");
                 const std::size_t l = gpt_size(n_layers, "n_layers", num_layer, "num_layer");
                 const std::size_t e = gpt_size(d_model, "d_model", embed_dim, "embed_dim");
                 const std::size_t h = gpt_size(n_head, "n_head", num_head, "num_head");
                 const std::size_t f = gpt_size(d_inner, "d_inner", feedforward_dim, "feedforward_dim");
                 // No dropout by default, as nanoGPT's GPTConfig (dropout = 0.0).
                 if (!dropout.is_none() && !py::isinstance<py::float_>(dropout) && !py::isinstance<py::int_>(dropout))
                     throw ct::TypeError("GPT: dropout must be a number, got " + type_name(dropout));
                 const float p = dropout.is_none() ? 0.0f : dropout.cast<float>();
                 Options options;
                 options.layer_norm_epsilon = float(layer_norm_epsilon);
                 options.activation = parse_activation(activation_function, "GPT: activation_function");
                 options.scale_attn_weights = scale_attn_weights;
                 options.scale_attn_by_inverse_layer_idx = scale_attn_by_inverse_layer_idx;
                 options.tie_word_embeddings = tie_word_embeddings;
                 py::gil_scoped_release release;
                 return std::make_shared<GPT>(v, t, l, e, h, f, p, no_res, no_pos, options);
             }),
             py::arg("vocab_size"), py::arg("max_seq_len"), py::arg("n_layers") = py::none(),
             py::arg("d_model") = py::none(), py::arg("n_head") = py::none(), py::arg("d_inner") = py::none(),
             py::arg("dropout") = py::none(), py::arg("no_res") = false, py::arg("no_pos") = false, py::kw_only(),
             py::arg("num_layer") = py::none(), py::arg("embed_dim") = py::none(), py::arg("num_head") = py::none(),
             py::arg("feedforward_dim") = py::none(), py::arg("layer_norm_epsilon") = 1e-5,
             py::arg("activation_function") = "gelu_new", py::arg("scale_attn_weights") = true,
             py::arg("scale_attn_by_inverse_layer_idx") = false, py::arg("tie_word_embeddings") = true)
        .def("forward", &gpt_forward, py::arg("word_idx"), py::arg("targets") = py::none(),
             R"doc(word_idx: integer array (batch, seq_len), seq_len <= max_seq_len.

Returns (logits (batch, seq_len, vocab_size), loss) when targets (same shape) are given, the loss
being cross-entropy with ignore_index=0; otherwise (logits, [attention weights of each layer]).)doc")
        .def("init_weights", &GPT::init_weights, release_gil(), "Redraw every weight as the constructor does.")
        .def("configure_optimizers", [](const GPT& m, double weight_decay) {
            py::list groups;
            const auto built = m.configure_optimizers(float(weight_decay));
            for (std::size_t i = 0; i < built.size(); ++i) {
                py::dict d;
                d["params"] = py::cast(built[i].params);
                // The caller's number itself (a double), not its float32 rounding.
                d["weight_decay"] = i == 0 ? weight_decay : double(built[i].weight_decay);
                groups.append(d);
            }
            return groups;
        }, py::arg("weight_decay"),
           R"doc([{"params": Linear weights, "weight_decay": weight_decay},
 {"params": biases, LayerNorm and Embedding weights, "weight_decay": 0.0}], each sorted by
parameter name; the tied head weight appears once (as word_token_embedding.weight, no decay).)doc")
        .def("generate", [](const GPT& m, py::object idx, ctpy::Int max_new_tokens_obj, float temperature,
                            py::object top_k_obj, bool use_cache) {
            if (PyIndex_Check(max_new_tokens_obj.ptr()) && !py::isinstance<py::bool_>(max_new_tokens_obj) &&
                py::int_(max_new_tokens_obj) < py::int_(0))
                throw ct::ValueError("GPT.generate: max_new_tokens must be >= 0, got " +
                                     py::str(max_new_tokens_obj).cast<std::string>());
            const auto max_new_tokens = std::size_t(to_int_at_least(max_new_tokens_obj, "GPT.generate: max_new_tokens", 0));
            std::optional<std::int64_t> top_k;
            if (!top_k_obj.is_none()) top_k = to_int(top_k_obj, "GPT.generate: top_k");
            const ct::IndexArray ids = to_index_array(idx, "idx");
            const auto should_stop = python_should_stop();
            ct::IndexArray out;
            {
                py::gil_scoped_release release;
                out = ct::decode::generate(m, ids, max_new_tokens, temperature, top_k, should_stop, use_cache);
            }
            // As the blog post's GPT: idx.squeeze().cpu().numpy().
            return ids_to_numpy(out).attr("squeeze")();
        }, py::arg("idx"), py::arg("max_new_tokens"), py::arg("temperature") = 1.0f, py::arg("top_k") = py::none(),
           py::arg("use_cache") = true,
           R"doc(Append max_new_tokens ids to idx (batch, t), each drawn from softmax(logits[:, -1] / temperature)
restricted to the top_k largest logits; the context is cropped to its last max_seq_len ids. No graph is
recorded; draws come from the manual_seed generator. Returns the int64 ids squeezed, as the blog post's GPT
(shape (t + max_new_tokens,) for one sequence).

use_cache=True (the default) keeps each layer's keys/values so a token costs one position's work
(ctransformer.decode.generate; once the context is longer than max_seq_len the cache is rebuilt from
the cropped window at each step, as positions are absolute). use_cache=False is the blog post's loop, the
whole context re-run per token; both give the same ids.)doc")
        .def_readonly("word_token_embedding", &GPT::word_token_embedding)
        .def_readonly("word_pos_embedding", &GPT::word_pos_embedding)
        .def_readonly("drop", &GPT::drop)
        .def_readonly("transformer", &GPT::transformer)
        .def_readonly("norm", &GPT::norm)
        .def_readonly("language_model_head", &GPT::language_model_head)
        .def_readonly("vocab_size", &GPT::vocab_size)
        .def_readonly("max_seq_len", &GPT::max_seq_len)
        .def_readonly("n_layers", &GPT::num_layer)
        .def_readonly("d_model", &GPT::embed_dim)
        .def_readonly("n_head", &GPT::num_head)
        .def_readonly("d_inner", &GPT::feedforward_dim)
        .def_readonly("num_layer", &GPT::num_layer, "The older name for n_layers.")
        .def_readonly("embed_dim", &GPT::embed_dim, "The older name for d_model.")
        .def_readonly("num_head", &GPT::num_head, "The older name for n_head.")
        .def_readonly("feedforward_dim", &GPT::feedforward_dim, "The older name for d_inner.")
        .def_readonly("no_res", &GPT::no_res)
        .def_readonly("no_pos", &GPT::no_pos)
        .def_property_readonly("layer_norm_epsilon", [](const GPT& m) { return double(m.options.layer_norm_epsilon); })
        .def_property_readonly("activation_function", [](const GPT& m) { return activation_name(m.options.activation); })
        .def_property_readonly("scale_attn_weights", [](const GPT& m) { return m.options.scale_attn_weights; })
        .def_property_readonly("scale_attn_by_inverse_layer_idx",
                               [](const GPT& m) { return m.options.scale_attn_by_inverse_layer_idx; })
        .def_property_readonly("tie_word_embeddings", [](const GPT& m) { return m.options.tie_word_embeddings; })
        .def_readonly_static("ignore_index", &GPT::ignore_index);
}

}  // namespace ctpy
