#include "ctransformer/nn/gpt/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/decode/sampling.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/loss/cross_entropy.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/shape.hpp"
#include "ctransformer/runtime/random.hpp"
#include "decode/generate_checks.hpp"
#include "nn/stack_helpers.hpp"

namespace ct::nn::gpt {

namespace {

// torch's named_modules(): the module itself ("") first, then each child depth-first.
void walk(const std::string& prefix, const std::shared_ptr<Module>& m,
          const std::function<void(const std::string&, Module&)>& fn) {
    fn(prefix, *m);
    for (const auto& [name, child] : m->named_children()) walk(prefix.empty() ? name : prefix + "." + name, child, fn);
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string position_str(std::size_t flat, const Shape& shape) {
    std::vector<std::size_t> index(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        index[d] = flat % shape[d];
        flat /= shape[d];
    }
    std::string s = "(";
    for (std::size_t d = 0; d < index.size(); ++d) s += (d ? ", " : "") + std::to_string(index[d]);
    return s + ")";
}

}  // namespace

GPT::GPT(std::size_t vocab, std::size_t max_len, std::size_t layers, std::size_t embed, std::size_t heads,
         std::size_t ff, float p, bool without_res, bool without_pos, const Options& o)
    : vocab_size(vocab), max_seq_len(max_len), num_layer(layers), embed_dim(embed), num_head(heads),
      feedforward_dim(ff), dropout(p), no_res(without_res), no_pos(without_pos), options(o) {
    if (!std::isfinite(o.layer_norm_epsilon) || !(o.layer_norm_epsilon > 0.0f))
        throw ValueError("GPT: layer_norm_epsilon must be a positive finite number, got " +
                         std::to_string(o.layer_norm_epsilon));
    if (vocab == 0 || max_len == 0 || embed == 0 || ff == 0)
        throw ValueError("GPT: vocab_size, max_seq_len, embed_dim and feedforward_dim must be positive, got " +
                         std::to_string(vocab) + ", " + std::to_string(max_len) + ", " + std::to_string(embed) +
                         ", " + std::to_string(ff));
    word_token_embedding = register_module("word_token_embedding", std::make_shared<Embedding>(vocab, embed));
    word_pos_embedding = register_module("word_pos_embedding", std::make_shared<Embedding>(max_len, embed));
    drop = register_module("drop", std::make_shared<Dropout>(p));
    transformer = register_module("transformer", std::make_shared<ModuleList<TransformerLayer>>());
    // The layers' total before the first is built: q, k, v and the projection are embed x embed; the feed-forward embed x ff twice.
    nn::detail::check_layers_fit("GPT: the weights of num_layer=" + std::to_string(layers) + " layers", layers,
                                 4.0L * embed * embed + nn::detail::feed_forward_floats(embed, ff));
    for (std::size_t l = 0; l < layers; ++l)
        transformer->append(std::make_shared<TransformerLayer>(embed, heads, ff, p, without_res, o, l));
    norm = register_module("norm", std::make_shared<LayerNorm>(embed, o.layer_norm_epsilon));
    language_model_head = register_module("language_model_head", std::make_shared<Linear>(embed, vocab, false));
    // Weight tying, as the seed: the embedding's weight becomes the head's weight (one tensor).
    if (o.tie_word_embeddings) word_token_embedding->weight = language_model_head->weight;
    init_weights();
}

void GPT::init_weights() {
    // A non-owning handle on this module, to walk the tree like torch's self.modules().
    std::shared_ptr<Module> self(std::shared_ptr<Module>(), this);
    walk("", self, [](const std::string&, Module& m) {
        if (auto* linear = dynamic_cast<Linear*>(&m)) {
            normal_(linear->weight, 0.0f, 0.02f);
            if (linear->has_bias) std::fill_n(linear->bias.data(), linear->bias.numel(), 0.0f);
        } else if (auto* emb = dynamic_cast<Embedding*>(&m)) {
            normal_(emb->weight, 0.0f, 0.02f);
        }
    });
    // The GPT-2 scaled init of the residual projections, selected by name as the seed does.
    const float proj_std = 0.02f / std::sqrt(2.0f * float(num_layer));
    for (auto& [name, p] : named_parameters())
        if (ends_with(name, "proj_layer.weight")) normal_(p, 0.0f, proj_std);
}

void GPT::check_ids(const IndexArray& ids, const char* fn, const char* arg) const {
    for (std::size_t i = 0; i < ids.numel(); ++i)
        if (ids.data[i] < 0 || ids.data[i] >= std::int64_t(vocab_size))
            throw IndexError(std::string(fn) + ": " + arg + " holds token id " + std::to_string(ids.data[i]) + " at " +
                             position_str(i, ids.shape) + ", outside the vocabulary [0, " +
                             std::to_string(vocab_size) + ")");
}

void GPT::check_idx(const IndexArray& idx, const char* fn, const char* arg, std::size_t start_pos,
                    bool limit_len) const {
    if (idx.shape.size() != 2 || idx.shape[0] == 0 || idx.shape[1] == 0)
        throw ValueError(std::string(fn) + ": " + arg + " must have shape (batch, seq_len) with both at least 1, got " +
                         shape_str(idx.shape));
    const std::size_t t = idx.shape[1];
    if (limit_len && start_pos + t > max_seq_len)
        throw ValueError(std::string(fn) + ": " + arg + " has seq_len " + std::to_string(t) +
                         (start_pos ? " after " + std::to_string(start_pos) + " earlier positions" : std::string()) +
                         ", more than max_seq_len = " + std::to_string(max_seq_len));
    check_ids(idx, fn, arg);
}

Tensor GPT::embed(const IndexArray& idx, std::size_t start_pos) const {
    check_idx(idx, "GPT.embed", "idx", start_pos, true);
    const std::size_t t = idx.shape[1];
    Tensor x = word_token_embedding->forward(idx);  // (b, t, E)
    if (!no_pos) {
        IndexArray pos{std::vector<std::int64_t>(t), {t}};
        for (std::size_t i = 0; i < t; ++i) pos.data[i] = std::int64_t(start_pos + i);
        x = add(x, word_pos_embedding->forward(pos));  // (t, E) broadcast over the batch
    }
    return drop->forward(x);
}

Tensor GPT::hidden(const IndexArray& idx, Cache* cache, std::vector<Tensor>* attention_weights) const {
    if (cache && cache->layers.size() != num_layer)
        throw RuntimeError("GPT.hidden: the cache has " + std::to_string(cache->layers.size()) + " layers, the model " +
                           std::to_string(num_layer) + " (make it with start_cache)");
    Tensor x = embed(idx, cache ? cache->length : 0);   // checks the ids and that the positions fit
    const auto& layers = transformer->items();
    for (std::size_t l = 0; l < layers.size(); ++l) {
        auto [y, attn] = layers[l]->forward(x, cache ? &cache->layers[l] : nullptr);
        x = y;
        if (attention_weights) attention_weights->push_back(attn);
    }
    if (cache) cache->length += idx.shape[1];
    return x;
}

Tensor GPT::logits_sequences(const std::vector<std::int64_t>& ids, const std::vector<Cache*>& caches,
                             const std::vector<std::size_t>& offsets) const {
    const std::size_t rows = ids.size();
    if (offsets.size() != caches.size() + 1 || offsets.front() != 0 || offsets.back() != rows)
        throw ValueError("GPT.logits_sequences: offsets must run from 0 to the " + std::to_string(rows) +
                         " ids, one more than the " + std::to_string(caches.size()) + " caches");
    const IndexArray idx{ids, {rows, 1}};
    check_ids(idx, "GPT.logits_sequences", "ids");
    Tensor x = word_token_embedding->forward(idx);   // (rows, 1, E)
    if (!no_pos) {   // each row at its own sequence's position
        IndexArray pos{std::vector<std::int64_t>(rows), {rows, 1}};
        for (std::size_t s = 0; s < caches.size(); ++s) {
            if (caches[s]->layers.size() != num_layer || caches[s]->length >= max_seq_len)
                throw ValueError("GPT.logits_sequences: a cache must come from start_cache and hold fewer than "
                                 "max_seq_len = " + std::to_string(max_seq_len) + " positions");
            for (std::size_t r = offsets[s]; r < offsets[s + 1]; ++r) pos.data[r] = std::int64_t(caches[s]->length);
        }
        x = add(x, word_pos_embedding->forward(pos));
    }
    x = drop->forward(x);
    std::vector<KeyValue*> layer_caches(caches.size());
    const auto& layers = transformer->items();
    for (std::size_t l = 0; l < layers.size(); ++l) {
        for (std::size_t s = 0; s < caches.size(); ++s) layer_caches[s] = &caches[s]->layers[l];
        x = layers[l]->forward_sequences(x, layer_caches, offsets);
    }
    for (Cache* c : caches) c->length += 1;
    return language_model_head->forward(norm->forward(reshape(x, {std::int64_t(rows), std::int64_t(embed_dim)})));
}

Tensor GPT::last_logits(const Tensor& hidden) const {
    if (hidden.dim() != 3 || hidden.size(1) == 0 || hidden.size(2) != embed_dim)
        throw ValueError("GPT.last_logits: hidden must be (batch, seq_len >= 1, embed_dim = " + std::to_string(embed_dim) +
                         "), got " + shape_str(hidden.shape()));
    const std::size_t b = hidden.size(0), t = hidden.size(1), E = embed_dim;
    Tensor last = Tensor::zeros({b, E});
    for (std::size_t r = 0; r < b; ++r) std::copy_n(hidden.data() + (r * t + t - 1) * E, E, last.data() + r * E);
    return language_model_head->forward(norm->forward(last));   // (b, V)
}

GPT::Output GPT::forward(const IndexArray& idx, const IndexArray* targets) const {
    check_idx(idx, "GPT.forward", "word_idx", 0, true);
    if (targets) {
        if (targets->shape != idx.shape)
            throw ValueError("GPT.forward: targets must have the shape of word_idx " + shape_str(idx.shape) + ", got " +
                             shape_str(targets->shape));
        check_ids(*targets, "GPT.forward", "targets");
    }
    Output out;
    const Tensor x = hidden(idx, nullptr, &out.attention_weights);
    out.logits = language_model_head->forward(norm->forward(x));
    if (targets) {
        IndexArray flat{targets->data, {targets->numel()}};
        out.loss = cross_entropy(reshape(out.logits, {-1, std::int64_t(vocab_size)}), flat, ignore_index);
    }
    return out;
}

std::vector<GPT::ParamGroup> GPT::configure_optimizers(float weight_decay) const {
    // The seed's walk: every (module, its recursive parameters) pair, classified by the suffix of
    // the parameter's name and the type of the module that owns it.
    std::set<std::string> decay, no_decay;
    std::shared_ptr<Module> self(std::shared_ptr<Module>(), const_cast<GPT*>(this));
    walk("", self, [&](const std::string& mn, Module& m) {
        for (const auto& [pn, p] : m.named_parameters()) {
            const std::string fpn = mn.empty() ? pn : mn + "." + pn;
            if (ends_with(pn, "bias"))
                no_decay.insert(fpn);
            else if (ends_with(pn, "weight") && dynamic_cast<Linear*>(&m))
                decay.insert(fpn);
            else if (ends_with(pn, "weight") && (dynamic_cast<LayerNorm*>(&m) || dynamic_cast<Embedding*>(&m)))
                no_decay.insert(fpn);
        }
    });
    // The tied head weight appears in decay through the head and in no_decay through the
    // embedding; named_parameters() knows it by its first name, the embedding's, so it stays
    // there only (not decayed). An untied head's weight is a Linear's like any other.
    if (options.tie_word_embeddings) decay.erase("language_model_head.weight");

    std::map<std::string, Tensor> param_dict;
    for (const auto& [name, p] : named_parameters()) param_dict.emplace(name, p);
    for (const auto& name : decay)
        if (no_decay.count(name)) throw RuntimeError("GPT.configure_optimizers: " + name + " is in both groups");
    for (const auto& [name, p] : param_dict)
        if (!decay.count(name) && !no_decay.count(name))
            throw RuntimeError("GPT.configure_optimizers: " + name + " is in neither group");

    auto group = [&](const std::set<std::string>& names, float wd) {
        ParamGroup g{{}, {}, wd};
        for (const auto& name : names) {  // std::set iterates in sorted order, as sorted(list(...))
            g.names.push_back(name);
            g.params.push_back(param_dict.at(name));
        }
        return g;
    };
    return {group(decay, weight_decay), group(no_decay, 0.0f)};
}

IndexArray GPT::generate(const IndexArray& idx, std::size_t max_new_tokens, float temperature,
                         std::optional<std::int64_t> top_k, const decode::ShouldStop& should_stop) const {
    check_idx(idx, "GPT.generate", "idx", 0, false);  // longer than max_seq_len is fine: the context is cropped
    if (!(temperature > 0.0f) || !std::isfinite(temperature))
        throw ValueError("GPT.generate: temperature must be a positive finite number, got " +
                         std::to_string(temperature));
    if (top_k && *top_k < 1) throw ValueError("GPT.generate: top_k must be at least 1, got " + std::to_string(*top_k));

    NoGradGuard no_grad;
    const std::size_t b = idx.shape[0], V = vocab_size;
    std::vector<std::vector<std::int64_t>> rows(b);
    for (std::size_t r = 0; r < b; ++r)
        rows[r].assign(idx.data.begin() + std::ptrdiff_t(r * idx.shape[1]),
                       idx.data.begin() + std::ptrdiff_t((r + 1) * idx.shape[1]));
    const std::size_t k = top_k ? std::min<std::size_t>(std::size_t(*top_k), V) : V;
    decode::detail::checked_generate_length(b, idx.shape[1], max_new_tokens, "GPT.generate");

    for (std::size_t step = 0; step < max_new_tokens; ++step) {
        decode::check_should_stop(should_stop, "GPT.generate");
        // Crop the context to its last max_seq_len ids (the seed's comment; its code forgot to).
        const std::size_t T = rows[0].size(), tc = std::min(T, max_seq_len);
        IndexArray cond{std::vector<std::int64_t>(b * tc), {b, tc}};
        for (std::size_t r = 0; r < b; ++r) std::copy(rows[r].end() - std::ptrdiff_t(tc), rows[r].end(), cond.data.begin() + std::ptrdiff_t(r * tc));

        const Tensor logits = last_logits(hidden(cond));   // only the last position's: (b, V)

        for (std::size_t r = 0; r < b; ++r)
            rows[r].push_back(decode::sample_top_k(logits.data() + r * V, V, temperature, k, default_generator()));
    }

    const std::size_t T = rows[0].size();
    IndexArray out{std::vector<std::int64_t>(b * T), {b, T}};
    for (std::size_t r = 0; r < b; ++r) std::copy(rows[r].begin(), rows[r].end(), out.data.begin() + std::ptrdiff_t(r * T));
    return out;
}

}  // namespace ct::nn::gpt
