// ctransformer.nn: the encoder-decoder Transformer (the post-norm one and the small pre-norm model) and its parts.
// Token ids arrive as NumPy integer arrays, masks as NumPy boolean arrays (True = may attend);
// the maths runs with the GIL released.
#include <pybind11/stl.h>

#include <tuple>

#include "bindings.hpp"
#include "convert.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/nn/masks.hpp"
#include "ctransformer/nn/transformer.hpp"

namespace ctpy {

using ct::IndexArray;
using ct::Mask;
using ct::Tensor;
using namespace ct::nn;

namespace {

py::array mask_to_numpy(const Mask& m) {
    py::array_t<bool> out(std::vector<py::ssize_t>(m.shape.begin(), m.shape.end()));
    bool* p = out.mutable_data();
    for (std::size_t i = 0; i < m.data.size(); ++i) p[i] = m.data[i] != 0;
    return out;
}

const Mask* ptr(const std::optional<Mask>& m) { return m ? &*m : nullptr; }

py::list tensor_list(const std::vector<Tensor>& v) {
    py::list out;
    for (const auto& t : v) out.append(t);
    return out;
}

SublayerOptions make_options(const std::string& layout, bool norm_first, bool qkv_bias, bool proj_bias,
                             float layer_norm_eps, float attn_dropout, float mask_fill, bool scale_after_matmul,
                             const char* fn) {
    SublayerOptions o;
    o.layout = parse_layout(layout, fn);
    o.norm_first = norm_first;
    o.qkv_bias = qkv_bias;
    o.proj_bias = proj_bias;
    o.layer_norm_eps = layer_norm_eps;
    o.attn_dropout = attn_dropout;
    o.mask_fill = mask_fill;
    o.scale_after_matmul = scale_after_matmul;
    return o;
}

// The keyword-only sub-layer options, their defaults SublayerOptions' (nn/transformer_config.hpp).
#define CT_SUBLAYER_KWARGS                                                                                      \
    py::kw_only(), py::arg("layout") = layout_name(SublayerOptions{}.layout),                                    \
        py::arg("norm_first") = defaults::norm_first, py::arg("qkv_bias") = defaults::qkv_bias,                   \
        py::arg("proj_bias") = defaults::proj_bias, py::arg("layer_norm_eps") = defaults::layer_norm_eps,         \
        py::arg("attn_dropout") = defaults::attn_dropout, py::arg("mask_fill") = defaults::mask_fill,             \
        py::arg("scale_after_matmul") = defaults::scale_after_matmul

// The small pre-norm model's keyword arguments, its defaults from nn/transformer_config.hpp.
#define CT_SMALL_PRE_NORM_ARGS                                                                                         \
    py::arg("n_src_vocab") = defaults::small_pre_norm::vocab, py::arg("n_trg_vocab") = defaults::small_pre_norm::vocab, \
        py::arg("pad_idx") = defaults::small_pre_norm::pad_idx, py::arg("d_model") = defaults::small_pre_norm::d_model, \
        py::arg("n_head") = defaults::small_pre_norm::n_head, py::arg("d_inner") = defaults::small_pre_norm::d_inner,   \
        py::arg("n_layers") = defaults::small_pre_norm::n_layers,                                                      \
        py::arg("n_position") = defaults::small_pre_norm::n_position, py::arg("dropout") = defaults::small_pre_norm::dropout

const char* kSublayerDoc =
    "Keyword options (the post-norm model's defaults; the toy translator's small pre-norm model: layout='pre_norm', "
    "norm_first=True, qkv_bias=True, proj_bias=True, layer_norm_eps=1e-5, attn_dropout=0.0, mask_fill=-inf, "
    "scale_after_matmul=True). layout='seed000' and 'seed003' are older names of 'post_norm' and 'pre_norm'.";

py::object encoder_result(const EncoderOutput& r, bool return_attns) {
    if (!return_attns) return py::cast(r.output);
    return py::make_tuple(r.output, tensor_list(r.slf_attns));
}

py::object decoder_result(const DecoderOutput& r, bool return_attns) {
    if (!return_attns) return py::cast(r.output);
    return py::make_tuple(r.output, tensor_list(r.slf_attns), tensor_list(r.enc_attns));
}

// Encoder.forward and Transformer.encode: convert and check the arguments, run without the GIL.
template <class Run>
py::object run_encoder(py::object src_seq, py::object src_mask, bool return_attns, Run run) {
    IndexArray ids = to_index_array(src_seq, "src_seq");
    auto msk = opt_mask(src_mask, "src_mask");
    EncoderOutput r;
    {
        py::gil_scoped_release release;
        r = run(ids, ptr(msk));
    }
    return encoder_result(r, return_attns);
}

// Decoder.forward and Transformer.decode, likewise.
template <class Run>
py::object run_decoder(py::object trg_seq, py::object trg_mask, py::object src_mask, bool return_attns, Run run) {
    IndexArray ids = to_index_array(trg_seq, "trg_seq");
    auto tm = opt_mask(trg_mask, "trg_mask");
    auto sm = opt_mask(src_mask, "src_mask");
    DecoderOutput r;
    {
        py::gil_scoped_release release;
        r = run(ids, ptr(tm), ptr(sm));
    }
    return decoder_result(r, return_attns);
}

// TransformerConfig's integer fields: any Python int, range-checked by name (not pybind11's cast).
auto size_getter(std::size_t TransformerConfig::*field) {
    return [field](const TransformerConfig& c) { return c.*field; };
}
auto size_setter(std::size_t TransformerConfig::*field, const char* name) {
    return [field, name](TransformerConfig& c, py::object v) { c.*field = to_size(v, std::string("TransformerConfig: ") + name); };
}
// The per-side sizes: None (the shorthand's value) or a Python int, range-checked by name.
auto optional_size_getter(std::optional<std::size_t> TransformerConfig::*field) {
    return [field](const TransformerConfig& c) { return c.*field; };
}
auto optional_size_setter(std::optional<std::size_t> TransformerConfig::*field, const char* name) {
    return [field, name](TransformerConfig& c, py::object v) {
        if (v.is_none()) c.*field = std::nullopt;
        else c.*field = to_size(v, std::string("TransformerConfig: ") + name);
    };
}
auto int_getter(std::int64_t TransformerConfig::*field) {
    return [field](const TransformerConfig& c) { return c.*field; };
}
auto int_setter(std::int64_t TransformerConfig::*field, const char* name) {
    return [field, name](TransformerConfig& c, py::object v) { c.*field = to_int(v, std::string("TransformerConfig: ") + name); };
}

// EncoderLayer/DecoderLayer(d_model, d_inner, n_head, d_k, d_v, dropout, *, sub-layer options).
template <class Layer>
auto layer_init(const char* fn) {
    return py::init([fn](ctpy::Int d_model_obj, ctpy::Int d_inner_obj, ctpy::Int n_head_obj, ctpy::Int d_k_obj,
                         ctpy::Int d_v_obj, float dropout, const std::string& layout, bool norm_first, bool qkv_bias,
                         bool proj_bias, float eps, float attn_dropout, float mask_fill, bool after) {
        const std::string name = std::string(fn) + ": ";
        const std::size_t d_model = to_size(d_model_obj, name + "d_model"), d_inner = to_size(d_inner_obj, name + "d_inner"),
                          n_head = to_size(n_head_obj, name + "n_head"), d_k = to_size(d_k_obj, name + "d_k"),
                          d_v = to_size(d_v_obj, name + "d_v");
        return std::make_shared<Layer>(
            d_model, d_inner, n_head, d_k, d_v, dropout,
            make_options(layout, norm_first, qkv_bias, proj_bias, eps, attn_dropout, mask_fill, after, fn));
    });
}

// The sizes an Encoder or a Decoder takes, each checked by name (`vocab_name`: its vocabulary argument).
struct StackSizes {
    std::size_t vocab, d_word_vec, n_layers, n_head, d_k, d_v, d_model, d_inner, n_position;
    std::int64_t pad_idx;
};
StackSizes stack_sizes(const std::string& fn, const char* vocab_name, const py::handle& vocab, const py::handle& d_word_vec,
                       const py::handle& n_layers, const py::handle& n_head, const py::handle& d_k, const py::handle& d_v,
                       const py::handle& d_model, const py::handle& d_inner, const py::handle& pad_idx,
                       const py::handle& n_position) {
    return {to_size(vocab, fn + vocab_name), to_size(d_word_vec, fn + "d_word_vec"), to_size(n_layers, fn + "n_layers"),
            to_size(n_head, fn + "n_head"), to_size(d_k, fn + "d_k"), to_size(d_v, fn + "d_v"),
            to_size(d_model, fn + "d_model"), to_size(d_inner, fn + "d_inner"), to_size(n_position, fn + "n_position"),
            to_int(pad_idx, fn + "pad_idx")};
}

}  // namespace

void bind_nn_transformer(py::module_& nn) {
    // --- masks -------------------------------------------------------------------------------------
    nn.def("get_pad_mask", [](py::object seq, ctpy::Int pad_idx) {
        const std::int64_t pad = to_int(pad_idx, "get_pad_mask: pad_idx");
        return mask_to_numpy(get_pad_mask(to_index_array(seq, "seq"), pad));
    }, py::arg("seq"), py::arg("pad_idx"),
       "(seq != pad_idx)[:, None, :]: a (b, 1, len) boolean array, True where a key may be attended (jadore801120's get_pad_mask).");
    nn.def("get_subsequent_mask", [](py::object seq) {
        return mask_to_numpy(get_subsequent_mask(to_index_array(seq, "seq")));
    }, py::arg("seq"), "The no-peek mask: a (1, len, len) boolean array, True on and below the diagonal (jadore801120's get_subsequent_mask).");

    // --- configuration -----------------------------------------------------------------------------
    py::class_<TransformerConfig> config(nn, "TransformerConfig",
        "Every option of the encoder-decoder Transformer. The defaults are the paper's post-norm model (jadore801120's); "
        "TransformerConfig.small_pre_norm() is the toy translator's pre-norm model (older name: seed003()). "
        "Keyword arguments set fields.");
    config.def(py::init([](py::kwargs kwargs) {
              TransformerConfig c;
              py::object view = py::cast(&c, py::return_value_policy::reference);
              for (auto item : kwargs) {
                  const std::string key = py::str(item.first);
                  if (key.rfind("_", 0) == 0 || !py::hasattr(view, key.c_str()) || key == "seed003" ||
                      key == "small_pre_norm" || key == "marian" || key == "validate")
                      throw ct::TypeError("TransformerConfig: unexpected keyword argument '" + key + "'");
                  view.attr(key.c_str()) = item.second;
              }
              return c;
          }))
        .def_property("n_src_vocab", size_getter(&TransformerConfig::n_src_vocab), size_setter(&TransformerConfig::n_src_vocab, "n_src_vocab"))
        .def_property("n_trg_vocab", size_getter(&TransformerConfig::n_trg_vocab), size_setter(&TransformerConfig::n_trg_vocab, "n_trg_vocab"))
        .def_property("src_pad_idx", int_getter(&TransformerConfig::src_pad_idx), int_setter(&TransformerConfig::src_pad_idx, "src_pad_idx"))
        .def_property("trg_pad_idx", int_getter(&TransformerConfig::trg_pad_idx), int_setter(&TransformerConfig::trg_pad_idx, "trg_pad_idx"))
        .def_property("d_word_vec", size_getter(&TransformerConfig::d_word_vec), size_setter(&TransformerConfig::d_word_vec, "d_word_vec"))
        .def_property("d_model", size_getter(&TransformerConfig::d_model), size_setter(&TransformerConfig::d_model, "d_model"))
        .def_property("d_inner", size_getter(&TransformerConfig::d_inner), size_setter(&TransformerConfig::d_inner, "d_inner"))
        .def_property("n_layers", size_getter(&TransformerConfig::n_layers), size_setter(&TransformerConfig::n_layers, "n_layers"))
        .def_property("n_head", size_getter(&TransformerConfig::n_head), size_setter(&TransformerConfig::n_head, "n_head"))
        .def_property("d_k", size_getter(&TransformerConfig::d_k), size_setter(&TransformerConfig::d_k, "d_k"))
        .def_property("d_v", size_getter(&TransformerConfig::d_v), size_setter(&TransformerConfig::d_v, "d_v"))
#define CT_SIDE_SIZE(name) \
        .def_property(#name, optional_size_getter(&TransformerConfig::name), optional_size_setter(&TransformerConfig::name, #name))
        CT_SIDE_SIZE(encoder_n_layers) CT_SIDE_SIZE(encoder_n_head) CT_SIDE_SIZE(encoder_d_k) CT_SIDE_SIZE(encoder_d_v)
        CT_SIDE_SIZE(encoder_d_inner) CT_SIDE_SIZE(decoder_n_layers) CT_SIDE_SIZE(decoder_n_head) CT_SIDE_SIZE(decoder_d_k)
        CT_SIDE_SIZE(decoder_d_v) CT_SIDE_SIZE(decoder_d_inner)
#undef CT_SIDE_SIZE
        .def("encoder_side", &TransformerConfig::encoder_side,
             "This configuration with n_layers, n_head, d_k, d_v and d_inner set to the encoder's (the per-side "
             "values where set, else the shorthand) and no per-side values: what the encoder is built from.")
        .def("decoder_side", &TransformerConfig::decoder_side, "The decoder's, as encoder_side() is the encoder's.")
        .def_property_readonly("symmetric", &TransformerConfig::symmetric,
                               "Whether both sides have the same layers, heads, head sizes and FFN width.")
        .def_readwrite("dropout", &TransformerConfig::dropout)
        .def_property("n_position", size_getter(&TransformerConfig::n_position), size_setter(&TransformerConfig::n_position, "n_position"))
        .def_readwrite("trg_emb_prj_weight_sharing", &TransformerConfig::trg_emb_prj_weight_sharing)
        .def_readwrite("emb_src_trg_weight_sharing", &TransformerConfig::emb_src_trg_weight_sharing)
        .def_readwrite("scale_emb_or_prj", &TransformerConfig::scale_emb_or_prj)
        .def_property("layout", [](const TransformerConfig& c) { return layout_name(c.layout); },
                      [](TransformerConfig& c, const std::string& s) { c.layout = parse_layout(s, "TransformerConfig"); },
                      "'post_norm' (the paper's model with jadore801120's module names; older name 'seed000') or "
                      "'pre_norm' (one LayerNorm shared by q, k, v, the toy translator's module names; 'seed003') or "
                      "'marian' (Hugging Face's MarianMTModel names, the opus-mt translators).")
        .def_readwrite("norm_first", &TransformerConfig::norm_first)
        .def_readwrite("qkv_bias", &TransformerConfig::qkv_bias)
        .def_readwrite("proj_bias", &TransformerConfig::proj_bias)
        .def_readwrite("layer_norm_eps", &TransformerConfig::layer_norm_eps)
        .def_readwrite("attn_dropout", &TransformerConfig::attn_dropout)
        .def_readwrite("mask_fill", &TransformerConfig::mask_fill)
        .def_readwrite("scale_after_matmul", &TransformerConfig::scale_after_matmul)
        .def_property("pe_formula", [](const TransformerConfig& c) { return positional_formula_name(c.pe_formula); },
                      [](TransformerConfig& c, const std::string& s) {
                          c.pe_formula = parse_positional_formula(s, "TransformerConfig");
                      }, "'paired': pos / 10000^(2*(j//2)/d), sin on even j and cos on odd j (the post-norm model); "
                         "'per_index': pos / 10000^(j/d) (the pre-norm model); 'halves': the paired angles with all the "
                         "sines first, then all the cosines (Marian).")
        .def_property("activation", [](const TransformerConfig& c) { return activation_name(c.activation); },
                      [](TransformerConfig& c, const std::string& s) { c.activation = parse_activation(s, "TransformerConfig"); },
                      "The feed-forward's non-linearity, by Hugging Face's name: 'relu' (both seeds), 'gelu' (exact), "
                      "'gelu_new' (tanh form) or 'silu' ('swish').")
        .def_readwrite("activation_dropout", &TransformerConfig::activation_dropout,
                       "Dropout on the feed-forward's activation (Marian's activation_dropout); 0: none.")
        .def_readwrite("logits_bias", &TransformerConfig::logits_bias,
                       "A (1, n_trg_vocab) buffer final_logits_bias added to the logits, never trained (Marian).")
        .def_readwrite("trg_pad_mask", &TransformerConfig::trg_pad_mask,
                       "Hide target pads from the decoder's self-attention (the post-norm model); Marian does not.")
        .def_readwrite("decoder_start_idx", &TransformerConfig::decoder_start_idx,
                       "The decoder's first token when translating (Marian: the pad id); None: the caller's bos.")
        .def_readwrite("embed_dropout", &TransformerConfig::embed_dropout)
        .def_readwrite("embed_layer_norm", &TransformerConfig::embed_layer_norm)
        .def_readwrite("embedding_padding_idx", &TransformerConfig::embedding_padding_idx)
        .def_readwrite("xavier_init", &TransformerConfig::xavier_init)
        .def_readwrite("embedding_init_std", &TransformerConfig::embedding_init_std)
        .def_readwrite("output_bias", &TransformerConfig::output_bias)
        .def_readwrite("flatten_logits", &TransformerConfig::flatten_logits)
        .def("validate", &TransformerConfig::validate)
        .def_static("small_pre_norm", &TransformerConfig::small_pre_norm, CT_SMALL_PRE_NORM_ARGS,
                    "The toy translator's model: pre-norm with one LayerNorm shared by q, k and v, d_model 32, "
                    "4 heads, FFN 64, 3 + 3 layers, vocabulary 39, <PAD> = 2, length <= 50.")
        .def_static("marian", [](ctpy::Int vocab, std::optional<ctpy::Int> trg_vocab, ctpy::Int d_model, ctpy::Int d_inner,
                                 ctpy::Int n_layers, ctpy::Int n_head, ctpy::Int n_position, ctpy::Int pad_idx, bool share,
                                 bool tie, const std::string& activation, bool scale_embedding, float dropout,
                                 float attention_dropout, float activation_dropout, py::object decoder_n_layers,
                                 py::object decoder_n_head, py::object decoder_d_inner) {
            const std::string fn = "TransformerConfig.marian: ";
            const std::size_t v = to_size(vocab, fn + "vocab");
            TransformerConfig c = TransformerConfig::marian(
                v, trg_vocab ? to_size(*trg_vocab, fn + "trg_vocab") : v, to_size(d_model, fn + "d_model"),
                to_size(d_inner, fn + "d_inner"), to_size(n_layers, fn + "n_layers"), to_size(n_head, fn + "n_head"),
                to_size(n_position, fn + "n_position"), to_int(pad_idx, fn + "pad_idx"), share, tie,
                parse_activation(activation, "TransformerConfig.marian"), scale_embedding, dropout, attention_dropout,
                activation_dropout);
            // The decoder's own sizes (Marian's decoder_layers, decoder_attention_heads, decoder_ffn_dim); its
            // heads split d_model as the encoder's do.
            if (!decoder_n_layers.is_none()) c.decoder_n_layers = to_size(decoder_n_layers, fn + "decoder_n_layers");
            if (!decoder_d_inner.is_none()) c.decoder_d_inner = to_size(decoder_d_inner, fn + "decoder_d_inner");
            if (!decoder_n_head.is_none()) {
                const std::size_t h = to_size(decoder_n_head, fn + "decoder_n_head");
                if (h == 0 || c.d_model % h != 0)
                    throw ct::ValueError(fn + "d_model (" + std::to_string(c.d_model) + ") must be a multiple of "
                                         "decoder_n_head (" + std::to_string(h) + ")");
                c.decoder_n_head = h;
                c.decoder_d_k = c.decoder_d_v = c.d_model / h;
            }
            c.validate();
            return c;
        }, py::kw_only(), py::arg("vocab"), py::arg("trg_vocab") = py::none(), py::arg("d_model") = 512,
           py::arg("d_inner") = 2048, py::arg("n_layers") = 6, py::arg("n_head") = 8, py::arg("n_position") = 512,
           py::arg("pad_idx"), py::arg("share") = true, py::arg("tie") = true, py::arg("activation") = "swish",
           py::arg("scale_embedding") = true, py::arg("dropout") = 0.1f, py::arg("attention_dropout") = 0.0f,
           py::arg("activation_dropout") = 0.0f, py::arg("decoder_n_layers") = py::none(),
           py::arg("decoder_n_head") = py::none(), py::arg("decoder_d_inner") = py::none(),
           "Hugging Face's MarianMTModel (the opus-mt translators; defaults: opus-mt's base): post-norm layers with "
           "biased q/k/v/out, LayerNorm eps 1e-5, no embedding LayerNorm, the sinusoids in halves, final_logits_bias, "
           "the pad id as the decoder's start and no target pad mask; Hugging Face's module names. share: one "
           "embedding for both sides (share_encoder_decoder_embeddings); tie: the output projection is the target "
           "embedding (tie_word_embeddings). n_layers, n_head and d_inner are the encoder's and, unless "
           "decoder_n_layers, decoder_n_head or decoder_d_inner say otherwise, the decoder's too.")
        .def_static("seed003", &TransformerConfig::small_pre_norm, CT_SMALL_PRE_NORM_ARGS,
                    "The older name of small_pre_norm(), kept as an alias.")
        .def("__repr__", [](py::object self) {
            std::string s = "TransformerConfig(";
            bool first = true;
            for (auto name : {"n_src_vocab", "n_trg_vocab", "src_pad_idx", "trg_pad_idx", "d_word_vec", "d_model",
                              "d_inner", "n_layers", "n_head", "d_k", "d_v", "encoder_n_layers", "encoder_n_head",
                              "encoder_d_k", "encoder_d_v", "encoder_d_inner", "decoder_n_layers", "decoder_n_head",
                              "decoder_d_k", "decoder_d_v", "decoder_d_inner", "dropout", "n_position",
                              "trg_emb_prj_weight_sharing", "emb_src_trg_weight_sharing", "scale_emb_or_prj", "layout",
                              "norm_first", "qkv_bias", "proj_bias", "layer_norm_eps", "attn_dropout", "mask_fill",
                              "scale_after_matmul", "pe_formula", "embed_dropout", "embed_layer_norm",
                              "embedding_padding_idx", "xavier_init", "embedding_init_std", "output_bias",
                              "flatten_logits", "activation", "activation_dropout", "logits_bias", "trg_pad_mask",
                              "decoder_start_idx"}) {
                s += (first ? "" : ", ") + std::string(name) + "=" + py::repr(self.attr(name)).cast<std::string>();
                first = false;
            }
            return s + ")";
        });

    // --- layers ------------------------------------------------------------------------------------
    py::class_<PositionalEncoding, Module, std::shared_ptr<PositionalEncoding>>(nn, "PositionalEncoding",
        "Adds the fixed sinusoid table, a buffer 'pos_table' of shape (1, n_position, d_hid).")
        .def(py::init([](ctpy::Int d_hid_obj, ctpy::Int n_position_obj, const std::string& pe_formula) {
            const std::size_t d_hid = to_size(d_hid_obj, "PositionalEncoding: d_hid");
            const std::size_t n_position = to_size(n_position_obj, "PositionalEncoding: n_position");
            return std::make_shared<PositionalEncoding>(d_hid, n_position,
                                                        parse_positional_formula(pe_formula, "PositionalEncoding"));
        }), py::arg("d_hid"), py::arg("n_position") = 200, py::arg("pe_formula") = "paired")
        .def("forward", [](const PositionalEncoding& m, const Tensor& x) { return m.forward(x); }, py::arg("x"),
             py::call_guard<py::gil_scoped_release>())
        .def_readonly("pos_table", &PositionalEncoding::pos_table)
        .def_readonly("d_hid", &PositionalEncoding::d_hid)
        .def_readonly("n_position", &PositionalEncoding::n_position);

    auto sdpa = [](const ScaledDotProductAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                   py::object mask) {
        auto msk = opt_mask(mask, "mask");
        py::gil_scoped_release release;
        return m.forward(q, k, v, ptr(msk));
    };
    py::class_<ScaledDotProductAttention, Module, std::shared_ptr<ScaledDotProductAttention>>(
        nn, "ScaledDotProductAttention",
        "softmax(q / temperature @ k^T, masked) -> dropout -> @ v; forward returns (output, attn).")
        .def(py::init<float, float, float, bool>(), py::arg("temperature"), py::arg("attn_dropout") = defaults::attn_dropout,
             py::arg("mask_fill") = defaults::mask_fill, py::arg("scale_after_matmul") = defaults::scale_after_matmul)
        .def("forward", sdpa, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none())
        .def_readonly("temperature", &ScaledDotProductAttention::temperature)
        .def_readonly("dropout", &ScaledDotProductAttention::dropout);

    auto mha = [](const MultiHeadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v, py::object mask) {
        auto msk = opt_mask(mask, "mask");
        py::gil_scoped_release release;
        return m.forward(q, k, v, ptr(msk));
    };
    py::class_<MultiHeadAttention, Module, std::shared_ptr<MultiHeadAttention>>(nn, "MultiHeadAttention",
        (std::string("Multi-head attention (jadore801120's SubLayers.py). forward(q, k, v, mask=None) returns "
                     "(output, attn); mask is (b or 1, len_q or 1, len_k), True = may attend. ") + kSublayerDoc).c_str())
        .def(py::init([](ctpy::Int n_head_obj, ctpy::Int d_model_obj, ctpy::Int d_k_obj, ctpy::Int d_v_obj,
                         float dropout, const std::string& layout, bool norm_first, bool qkv_bias, bool proj_bias,
                         float eps, float attn_dropout, float mask_fill, bool after) {
            const std::string fn = "MultiHeadAttention: ";
            const std::size_t n_head = to_size(n_head_obj, fn + "n_head"), d_model = to_size(d_model_obj, fn + "d_model"),
                              d_k = to_size(d_k_obj, fn + "d_k"), d_v = to_size(d_v_obj, fn + "d_v");
            return std::make_shared<MultiHeadAttention>(
                n_head, d_model, d_k, d_v, dropout,
                make_options(layout, norm_first, qkv_bias, proj_bias, eps, attn_dropout, mask_fill, after,
                             "MultiHeadAttention"));
        }), py::arg("n_head"), py::arg("d_model"), py::arg("d_k"), py::arg("d_v"), py::arg("dropout") = 0.1,
             CT_SUBLAYER_KWARGS)
        .def("forward", mha, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none())
        .def_readonly("n_head", &MultiHeadAttention::n_head)
        .def_readonly("d_k", &MultiHeadAttention::d_k)
        .def_readonly("d_v", &MultiHeadAttention::d_v)
        .def_readonly("w_qs", &MultiHeadAttention::w_qs)
        .def_readonly("w_ks", &MultiHeadAttention::w_ks)
        .def_readonly("w_vs", &MultiHeadAttention::w_vs)
        .def_readonly("fc", &MultiHeadAttention::fc)
        .def_readonly("attention", &MultiHeadAttention::attention)
        .def_readonly("dropout", &MultiHeadAttention::dropout)
        .def_readonly("layer_norm", &MultiHeadAttention::layer_norm);

    py::class_<PositionwiseFeedForward, Module, std::shared_ptr<PositionwiseFeedForward>>(
        nn, "PositionwiseFeedForward",
        (std::string("w_2(relu(w_1(x))) with dropout, residual and LayerNorm (post- or pre-norm). ") + kSublayerDoc)
            .c_str())
        .def(py::init([](ctpy::Int d_in_obj, ctpy::Int d_hid_obj, float dropout, const std::string& layout,
                         bool norm_first, bool qkv_bias, bool proj_bias, float eps, float attn_dropout,
                         float mask_fill, bool after) {
            const std::size_t d_in = to_size(d_in_obj, "PositionwiseFeedForward: d_in");
            const std::size_t d_hid = to_size(d_hid_obj, "PositionwiseFeedForward: d_hid");
            return std::make_shared<PositionwiseFeedForward>(
                d_in, d_hid, dropout,
                make_options(layout, norm_first, qkv_bias, proj_bias, eps, attn_dropout, mask_fill, after,
                             "PositionwiseFeedForward"));
        }), py::arg("d_in"), py::arg("d_hid"), py::arg("dropout") = 0.1, CT_SUBLAYER_KWARGS)
        .def("forward", &PositionwiseFeedForward::forward, py::arg("x"), py::call_guard<py::gil_scoped_release>())
        .def_readonly("w_1", &PositionwiseFeedForward::w_1)
        .def_readonly("w_2", &PositionwiseFeedForward::w_2)
        .def_readonly("layer_norm", &PositionwiseFeedForward::layer_norm)
        .def_readonly("dropout", &PositionwiseFeedForward::dropout);

    auto enc_layer = [](const EncoderLayer& m, const Tensor& x, py::object mask) {
        auto msk = opt_mask(mask, "slf_attn_mask");
        py::gil_scoped_release release;
        return m.forward(x, ptr(msk));
    };
    py::class_<EncoderLayer, Module, std::shared_ptr<EncoderLayer>>(nn, "EncoderLayer",
        (std::string("Self-attention then feed-forward; forward returns (enc_output, enc_slf_attn). ") + kSublayerDoc)
            .c_str())
        .def(layer_init<EncoderLayer>("EncoderLayer"), py::arg("d_model"), py::arg("d_inner"), py::arg("n_head"), py::arg("d_k"), py::arg("d_v"),
             py::arg("dropout") = 0.1, CT_SUBLAYER_KWARGS)
        .def("forward", enc_layer, py::arg("enc_input"), py::arg("slf_attn_mask") = py::none())
        .def_readonly("slf_attn", &EncoderLayer::slf_attn)
        .def_readonly("pos_ffn", &EncoderLayer::pos_ffn);

    auto dec_layer = [](const DecoderLayer& m, const Tensor& x, const Tensor& enc_output, py::object slf_mask,
                        py::object enc_mask) {
        auto m1 = opt_mask(slf_mask, "slf_attn_mask");
        auto m2 = opt_mask(enc_mask, "dec_enc_attn_mask");
        py::gil_scoped_release release;
        return m.forward(x, enc_output, ptr(m1), ptr(m2));
    };
    py::class_<DecoderLayer, Module, std::shared_ptr<DecoderLayer>>(nn, "DecoderLayer",
        (std::string("Masked self-attention, encoder-decoder attention, feed-forward; forward returns "
                     "(dec_output, dec_slf_attn, dec_enc_attn). ") + kSublayerDoc).c_str())
        .def(layer_init<DecoderLayer>("DecoderLayer"), py::arg("d_model"), py::arg("d_inner"), py::arg("n_head"), py::arg("d_k"), py::arg("d_v"),
             py::arg("dropout") = 0.1, CT_SUBLAYER_KWARGS)
        .def("forward", dec_layer, py::arg("dec_input"), py::arg("enc_output"), py::arg("slf_attn_mask") = py::none(),
             py::arg("dec_enc_attn_mask") = py::none())
        .def_property_readonly("slf_attn", &DecoderLayer::slf_attn)
        .def_property_readonly("enc_attn", &DecoderLayer::enc_attn)
        .def_property_readonly("pos_ffn", &DecoderLayer::pos_ffn);

    auto pos_emb = [](const PositionEmbedding& m, py::object ids) {
        IndexArray idx = to_index_array(ids, "input");
        py::gil_scoped_release release;
        return m.forward(idx);
    };
    py::class_<PositionEmbedding, Module, std::shared_ptr<PositionEmbedding>>(nn, "PositionEmbedding",
        "The toy translator's embedding front: embed(ids) + pe[:, :len]; the model's embed_x / embed_y.")
        .def("forward", pos_emb, py::arg("input"))
        .def_readonly("embed", &PositionEmbedding::embed)
        .def_property_readonly("pe", [](const PositionEmbedding& m) { return m.position_enc->pos_table; });

    // --- encoder, decoder --------------------------------------------------------------------------
    auto encode = [](const Encoder& m, py::object src_seq, py::object src_mask, bool return_attns) {
        return run_encoder(src_seq, src_mask, return_attns,
                           [&](const IndexArray& ids, const Mask* msk) { return m.forward(ids, msk, return_attns); });
    };
    py::class_<Encoder, Module, std::shared_ptr<Encoder>>(nn, "Encoder",
        "Embedding -> (* sqrt(d_model)) -> + positional encoding -> dropout -> LayerNorm -> EncoderLayers "
        "(jadore801120's Models.py). forward(src_seq, src_mask, return_attns=False) returns enc_output, or "
        "(enc_output, [enc_slf_attn per layer]).")
        .def(py::init([](ctpy::Int n_src_vocab, ctpy::Int d_word_vec, ctpy::Int n_layers, ctpy::Int n_head,
                         ctpy::Int d_k, ctpy::Int d_v, ctpy::Int d_model, ctpy::Int d_inner, ctpy::Int pad_idx,
                         float dropout, ctpy::Int n_position, bool scale_emb) {
                 const StackSizes s = stack_sizes("Encoder: ", "n_src_vocab", n_src_vocab, d_word_vec, n_layers, n_head,
                                                  d_k, d_v, d_model, d_inner, pad_idx, n_position);
                 py::gil_scoped_release release;
                 return std::make_shared<Encoder>(s.vocab, s.d_word_vec, s.n_layers, s.n_head, s.d_k, s.d_v, s.d_model,
                                                  s.d_inner, s.pad_idx, dropout, s.n_position, scale_emb);
             }),
             py::arg("n_src_vocab"), py::arg("d_word_vec"), py::arg("n_layers"), py::arg("n_head"), py::arg("d_k"),
             py::arg("d_v"), py::arg("d_model"), py::arg("d_inner"), py::arg("pad_idx"), py::arg("dropout") = 0.1,
             py::arg("n_position") = 200, py::arg("scale_emb") = false)
        .def(py::init<const TransformerConfig&, bool>(), py::arg("config"), py::arg("scale_emb") = false)
        .def("forward", encode, py::arg("src_seq"), py::arg("src_mask") = py::none(), py::arg("return_attns") = false)
        .def_readonly("src_word_emb", &Encoder::src_word_emb)
        .def_readonly("position_enc", &Encoder::position_enc)
        .def_property_readonly("layer_stack", [](const Encoder& m) { return m.layers; })
        .def_property_readonly("layer_norm", [](const Encoder& m) -> py::object {
            return m.layer_norm ? py::cast(m.layer_norm) : py::none();
        })
        .def_readonly("scale_emb", &Encoder::scale_emb);

    auto decode = [](const Decoder& m, py::object trg_seq, py::object trg_mask, const Tensor& enc_output,
                     py::object src_mask, bool return_attns) {
        return run_decoder(trg_seq, trg_mask, src_mask, return_attns,
                           [&](const IndexArray& ids, const Mask* tm, const Mask* sm) {
                               return m.forward(ids, tm, enc_output, sm, return_attns);
                           });
    };
    py::class_<Decoder, Module, std::shared_ptr<Decoder>>(nn, "Decoder",
        "The Encoder's front on the target, then DecoderLayers (jadore801120's Models.py). forward(trg_seq, trg_mask, enc_output, "
        "src_mask, return_attns=False) returns dec_output, or (dec_output, [dec_slf_attn], [dec_enc_attn]).")
        .def(py::init([](ctpy::Int n_trg_vocab, ctpy::Int d_word_vec, ctpy::Int n_layers, ctpy::Int n_head,
                         ctpy::Int d_k, ctpy::Int d_v, ctpy::Int d_model, ctpy::Int d_inner, ctpy::Int pad_idx,
                         ctpy::Int n_position, float dropout, bool scale_emb) {
                 const StackSizes s = stack_sizes("Decoder: ", "n_trg_vocab", n_trg_vocab, d_word_vec, n_layers, n_head,
                                                  d_k, d_v, d_model, d_inner, pad_idx, n_position);
                 py::gil_scoped_release release;
                 return std::make_shared<Decoder>(s.vocab, s.d_word_vec, s.n_layers, s.n_head, s.d_k, s.d_v, s.d_model,
                                                  s.d_inner, s.pad_idx, s.n_position, dropout, scale_emb);
             }),
             py::arg("n_trg_vocab"), py::arg("d_word_vec"), py::arg("n_layers"), py::arg("n_head"), py::arg("d_k"),
             py::arg("d_v"), py::arg("d_model"), py::arg("d_inner"), py::arg("pad_idx"), py::arg("n_position") = 200,
             py::arg("dropout") = 0.1, py::arg("scale_emb") = false)
        .def(py::init<const TransformerConfig&, bool>(), py::arg("config"), py::arg("scale_emb") = false)
        .def("forward", decode, py::arg("trg_seq"), py::arg("trg_mask"), py::arg("enc_output"), py::arg("src_mask"),
             py::arg("return_attns") = false)
        .def_readonly("trg_word_emb", &Decoder::trg_word_emb)
        .def_readonly("position_enc", &Decoder::position_enc)
        .def_property_readonly("layer_stack", [](const Decoder& m) { return m.layers; })
        .def_property_readonly("layer_norm", [](const Decoder& m) -> py::object {
            return m.layer_norm ? py::cast(m.layer_norm) : py::none();
        })
        .def_readonly("scale_emb", &Decoder::scale_emb);

    // --- the model ---------------------------------------------------------------------------------
    auto forward = [](const Transformer& m, py::object src_seq, py::object trg_seq, bool return_attns) -> py::object {
        IndexArray src = to_index_array(src_seq, "src_seq");
        IndexArray trg = to_index_array(trg_seq, "trg_seq");
        TransformerOutput r;
        {
            py::gil_scoped_release release;
            r = m.forward(src, trg, return_attns);
        }
        if (!return_attns) return py::cast(r.logits);
        return py::make_tuple(r.logits, tensor_list(r.enc_slf_attns), tensor_list(r.dec_slf_attns),
                              tensor_list(r.dec_enc_attns));
    };
    auto model_encode = [](const Transformer& m, py::object src_seq, py::object src_mask, bool return_attns) {
        return run_encoder(src_seq, src_mask, return_attns,
                           [&](const IndexArray& ids, const Mask* msk) { return m.encode(ids, msk, return_attns); });
    };
    auto model_decode = [](const Transformer& m, py::object trg_seq, py::object trg_mask, const Tensor& enc_output,
                           py::object src_mask, bool return_attns) {
        return run_decoder(trg_seq, trg_mask, src_mask, return_attns,
                           [&](const IndexArray& ids, const Mask* tm, const Mask* sm) {
                               return m.decode(ids, tm, enc_output, sm, return_attns);
                           });
    };
    auto small_pre_norm = [](ctpy::Int n_src_vocab, ctpy::Int n_trg_vocab, ctpy::Int pad_idx, ctpy::Int d_model,
                             ctpy::Int n_head, ctpy::Int d_inner, ctpy::Int n_layers, ctpy::Int n_position,
                             float dropout) {
        const std::string fn = "Transformer.small_pre_norm: ";
        const std::size_t sv = to_size(n_src_vocab, fn + "n_src_vocab");
        const std::size_t tv = to_size(n_trg_vocab, fn + "n_trg_vocab");
        const std::int64_t pad = to_int(pad_idx, fn + "pad_idx");
        const std::size_t dm = to_size(d_model, fn + "d_model");
        const std::size_t nh = to_size(n_head, fn + "n_head");
        const std::size_t di = to_size(d_inner, fn + "d_inner");
        const std::size_t nl = to_size(n_layers, fn + "n_layers");
        const std::size_t np = to_size(n_position, fn + "n_position");
        py::gil_scoped_release release;
        return std::make_shared<Transformer>(TransformerConfig::small_pre_norm(sv, tv, pad, dm, nh, di, nl, np, dropout));
    };
    py::class_<Transformer, Module, std::shared_ptr<Transformer>>(nn, "Transformer",
        R"doc(The encoder-decoder Transformer: the paper's post-norm model with jadore801120's
arguments, or the toy translator's small pre-norm model (Transformer.small_pre_norm(); older name
seed003()), or any TransformerConfig.

model(src_seq, trg_seq) takes (b, len) NumPy integer arrays and returns the logits, (b*len, n_trg_vocab)
for the post-norm model, (b, len, n_trg_vocab) for the small pre-norm one; with return_attns=True it returns
(logits, enc_slf_attns, dec_slf_attns, dec_enc_attns), one (b, n_head, lq, lk) Tensor per layer.

n_layers, n_head, d_k, d_v and d_inner size both sides; the keyword-only encoder_n_layers, decoder_n_layers,
encoder_n_head, decoder_n_head, encoder_d_k, ..., decoder_d_inner give one side its own (a distilled student's
6 encoder layers and 2 decoder ones: n_layers=6, decoder_n_layers=2).)doc")
        .def(py::init([](ctpy::Int n_src_vocab, ctpy::Int n_trg_vocab, ctpy::Int src_pad_idx, ctpy::Int trg_pad_idx,
                         ctpy::Int d_word_vec, ctpy::Int d_model, ctpy::Int d_inner, ctpy::Int n_layers,
                         ctpy::Int n_head, ctpy::Int d_k, ctpy::Int d_v, float dropout, ctpy::Int n_position,
                         bool trg_emb_prj_weight_sharing, bool emb_src_trg_weight_sharing,
                         const std::string& scale_emb_or_prj, std::optional<ctpy::Int> encoder_n_layers,
                         std::optional<ctpy::Int> encoder_n_head, std::optional<ctpy::Int> encoder_d_k,
                         std::optional<ctpy::Int> encoder_d_v, std::optional<ctpy::Int> encoder_d_inner,
                         std::optional<ctpy::Int> decoder_n_layers, std::optional<ctpy::Int> decoder_n_head,
                         std::optional<ctpy::Int> decoder_d_k, std::optional<ctpy::Int> decoder_d_v,
                         std::optional<ctpy::Int> decoder_d_inner) {
                 const std::string fn = "Transformer: ";
                 const std::size_t sv = to_size(n_src_vocab, fn + "n_src_vocab");
                 const std::size_t tv = to_size(n_trg_vocab, fn + "n_trg_vocab");
                 const std::int64_t sp = to_int(src_pad_idx, fn + "src_pad_idx");
                 const std::int64_t tp = to_int(trg_pad_idx, fn + "trg_pad_idx");
                 const std::size_t wv = to_size(d_word_vec, fn + "d_word_vec");
                 const std::size_t dm = to_size(d_model, fn + "d_model");
                 const std::size_t di = to_size(d_inner, fn + "d_inner");
                 const std::size_t nl = to_size(n_layers, fn + "n_layers");
                 const std::size_t nh = to_size(n_head, fn + "n_head");
                 const std::size_t dk = to_size(d_k, fn + "d_k");
                 const std::size_t dv = to_size(d_v, fn + "d_v");
                 const std::size_t np = to_size(n_position, fn + "n_position");
                 TransformerConfig c = TransformerConfig::post_norm(sv, tv, sp, tp, wv, dm, di, nl, nh, dk, dv, dropout,
                                                                    np, trg_emb_prj_weight_sharing,
                                                                    emb_src_trg_weight_sharing, scale_emb_or_prj);
                 // Keyword-only: one side's own sizes (encoder_n_layers=6, decoder_n_layers=2, ...).
                 for (const auto& [value, field, name] :
                      {std::tuple{&encoder_n_layers, &TransformerConfig::encoder_n_layers, "encoder_n_layers"},
                       {&encoder_n_head, &TransformerConfig::encoder_n_head, "encoder_n_head"},
                       {&encoder_d_k, &TransformerConfig::encoder_d_k, "encoder_d_k"},
                       {&encoder_d_v, &TransformerConfig::encoder_d_v, "encoder_d_v"},
                       {&encoder_d_inner, &TransformerConfig::encoder_d_inner, "encoder_d_inner"},
                       {&decoder_n_layers, &TransformerConfig::decoder_n_layers, "decoder_n_layers"},
                       {&decoder_n_head, &TransformerConfig::decoder_n_head, "decoder_n_head"},
                       {&decoder_d_k, &TransformerConfig::decoder_d_k, "decoder_d_k"},
                       {&decoder_d_v, &TransformerConfig::decoder_d_v, "decoder_d_v"},
                       {&decoder_d_inner, &TransformerConfig::decoder_d_inner, "decoder_d_inner"}})
                     if (*value) c.*field = to_size(**value, fn + name);
                 py::gil_scoped_release release;
                 return std::make_shared<Transformer>(c);
             }),
             py::arg("n_src_vocab"), py::arg("n_trg_vocab"), py::arg("src_pad_idx"), py::arg("trg_pad_idx"),
             py::arg("d_word_vec") = defaults::d_word_vec, py::arg("d_model") = defaults::d_model,
             py::arg("d_inner") = defaults::d_inner, py::arg("n_layers") = defaults::n_layers,
             py::arg("n_head") = defaults::n_head, py::arg("d_k") = defaults::d_k, py::arg("d_v") = defaults::d_v,
             py::arg("dropout") = defaults::dropout, py::arg("n_position") = defaults::n_position,
             py::arg("trg_emb_prj_weight_sharing") = defaults::trg_emb_prj_weight_sharing,
             py::arg("emb_src_trg_weight_sharing") = defaults::emb_src_trg_weight_sharing,
             py::arg("scale_emb_or_prj") = defaults::scale_emb_or_prj, py::kw_only(),
             py::arg("encoder_n_layers") = py::none(), py::arg("encoder_n_head") = py::none(),
             py::arg("encoder_d_k") = py::none(), py::arg("encoder_d_v") = py::none(),
             py::arg("encoder_d_inner") = py::none(), py::arg("decoder_n_layers") = py::none(),
             py::arg("decoder_n_head") = py::none(), py::arg("decoder_d_k") = py::none(),
             py::arg("decoder_d_v") = py::none(), py::arg("decoder_d_inner") = py::none())
        .def(py::init<const TransformerConfig&>(), py::arg("config"))
        .def_static("small_pre_norm", small_pre_norm, CT_SMALL_PRE_NORM_ARGS,
                    "The toy translator's small pre-norm model (TransformerConfig.small_pre_norm()).")
        .def_static("seed003", small_pre_norm, CT_SMALL_PRE_NORM_ARGS,
                    "The older name of small_pre_norm(), kept as an alias.")
        .def("forward", forward, py::arg("src_seq"), py::arg("trg_seq"), py::arg("return_attns") = false)
        .def("encode", model_encode, py::arg("src_seq"), py::arg("src_mask") = py::none(),
             py::arg("return_attns") = false,
             "The encoder alone: enc_output (b, ls, d_model), or (enc_output, enc_slf_attns).")
        .def("decode", model_decode, py::arg("trg_seq"), py::arg("trg_mask"), py::arg("enc_output"),
             py::arg("src_mask"), py::arg("return_attns") = false,
             "The decoder alone: dec_output (b, lt, d_model), or (dec_output, dec_slf_attns, dec_enc_attns). "
             "project(dec_output) gives the logits.")
        .def("project", &Transformer::project, py::arg("dec_output"), py::call_guard<py::gil_scoped_release>(),
             "Logits (b, lt, n_trg_vocab) from a decoder output, scaled by d_model^-0.5 when scale_emb_or_prj='prj'.")
        .def_property_readonly("config", [](const Transformer& m) { return m.config; },
                               "A copy of the configuration the model was built from.")
        .def_readonly("encoder", &Transformer::encoder)
        .def_readonly("decoder", &Transformer::decoder)
        .def_readonly("trg_word_prj", &Transformer::trg_word_prj)
        .def_readonly("lm_head", &Transformer::trg_word_prj, "Marian's name for trg_word_prj.")
        .def_readonly("final_logits_bias", &Transformer::final_logits_bias,
                      "Marian's (1, n_trg_vocab) logits bias buffer (config.logits_bias); an empty tensor otherwise.")
        .def_readonly("fc_out", &Transformer::trg_word_prj, "The toy translator's name for trg_word_prj.")
        .def_property_readonly("embed_x", [](const Transformer& m) { return m.encoder->embed; })
        .def_property_readonly("embed_y", [](const Transformer& m) { return m.decoder->embed; })
        .def_property_readonly("src_pad_idx", [](const Transformer& m) { return m.config.src_pad_idx; })
        .def_property_readonly("trg_pad_idx", [](const Transformer& m) { return m.config.trg_pad_idx; })
        .def_property_readonly("d_model", [](const Transformer& m) { return m.config.d_model; })
        .def_property_readonly("scale_prj", [](const Transformer& m) { return m.config.scale_prj(); });
}

}  // namespace ctpy
