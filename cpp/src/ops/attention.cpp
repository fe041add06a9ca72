#include "ctransformer/ops/attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "../blas.hpp"
#include "../kernels/simd/attention.hpp"
#include "../runtime/parallel.hpp"
#include "../runtime/random_bits.hpp"
#include "broadcast.hpp"
#include "ctransformer/autocast.hpp"
#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/bf16.hpp"
#include "ctransformer/distributed/batch_shard.hpp"
#include "ctransformer/error.hpp"
#include "ctransformer/ops/dropout.hpp"
#include "ctransformer/ops/elementwise.hpp"
#include "ctransformer/ops/masked_fill.hpp"
#include "ctransformer/ops/matmul.hpp"
#include "ctransformer/ops/softmax.hpp"
#include "ctransformer/runtime/random.hpp"

namespace ct {

namespace {

// Where the matrix of group g = (b, h) of a tensor starts, and its row stride: b * batch + h * head,
// rows `ld` apart. Heads interleaved (b, L, H d): batch = L H d, head = d, ld = H d. Heads split
// (..., L, d) with every leading dimension flattened into b: batch = L d, head = 0, ld = d. With a row
// map (keys and values shared between batch entries), entry b reads entry rows[b].
struct HeadView {
    std::size_t batch = 0, head = 0, ld = 0;
    const std::size_t* rows = nullptr;
    std::size_t at(std::size_t g, std::size_t H) const {
        return (rows ? rows[g / H] : g / H) * batch + (g % H) * head;
    }
};

struct Geometry {
    std::size_t G = 0, H = 1, Lq = 0, Lk = 0, dk = 0, dv = 0;
    HeadView q, k, v, out;
    std::vector<std::size_t> kv_rows;  // k's and v's row map (HeadView::rows), when they have one
    float scale = 1.0f, fill = -1e9f;
    bool causal = false;
    bool bf16 = false;  // made in an autocast region: the two products (and their backward) round to bf16
    // The mask (nonzero = attend), when there is one: per group its offset, then strides by query
    // row and by key column (0 where it broadcasts).
    std::vector<std::uint8_t> mask;
    std::vector<std::size_t> mask_group;
    std::size_t mask_row = 0, mask_col = 0;
    bool has_mask = false;

    // One product of one group, on the calling thread.
    void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
              float beta, float* c, int ldc) const {
        using Gemm = void (*)(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);
        const Gemm f = bf16 ? Gemm(&gemm_bf16_serial) : Gemm(&blas::gemm_serial);
        f(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }

    // row[j] = value wherever query i of group g may not attend key j (written so it vectorises).
    void fill_masked(float* row, std::size_t g, std::size_t i, float value) const {
        if (has_mask) {
            const std::uint8_t* m = mask.data() + mask_group[g] + i * mask_row;
            const std::size_t n = Lk;
            if (mask_col == 0) {
                if (m[0] == 0) std::fill_n(row, n, value);
            } else {
                for (std::size_t j = 0; j < n; ++j) {
                    const float x = row[j];
                    row[j] = m[j] ? x : value;
                }
            }
        }
        if (causal && i + (Lk - Lq) + 1 < Lk) std::fill(row + i + (Lk - Lq) + 1, row + Lk, value);
    }
    std::size_t scores() const { return Lq * Lk; }
};

// Groups per piece: at least ~2^18 operations' worth (~50 us), so a small attention stays on one
// thread (see blas.cpp on splitting small work). A group also costs two product calls and a softmax
// set-up, ~1500 operations' worth: decoding's groups (one query against ~20 keys) are mostly that, and
// counted without it, greedy decoding's attention at batch 32 (128 groups) would stay on one thread.
std::size_t group_grain(const Geometry& g) {
    const std::size_t per_group = g.Lq * g.Lk * (g.dk + g.dv + 24) + 1500;
    return std::max<std::size_t>(1, (std::size_t(1) << 18) / per_group);
}

// dS = P * (dP - rowsum(dP * P)), with dP = dattn (times the dropout multiplier), zero where masked
// (the filled scores are constants). One group's rows, into `ds`; each row takes the vector loop of the
// kernel level (kernels/simd/attention.cpp), fetched once per op call.
void softmax_backward_rows(const Geometry& geo, std::size_t g, const float* p, const float* dattn,
                           const std::uint8_t* keep, float keep_scale, float* ds,
                           decltype(kernels::AttentionLoops::backward_row) backward_row) {
    const std::size_t Lk = geo.Lk;
    for (std::size_t i = 0; i < geo.Lq; ++i) {
        float* dr = ds + i * Lk;
        backward_row(p + i * Lk, dattn + i * Lk, keep ? keep + i * Lk : nullptr, keep_scale, dr, Lk);
        geo.fill_masked(dr, g, i, 0.0f);
    }
}

// attn = dropout(softmax(fill(scale q k^T))): inputs q, k.
struct AttentionWeightsBackward : Node {
    std::shared_ptr<const Geometry> geo;
    Tensor probs;                     // softmax output P, (G, Lq, Lk) (the output itself without dropout)
    std::vector<std::uint8_t> keep;   // dropout's keep mask, empty without dropout
    float keep_scale = 1.0f;
    const char* name() const override { return "attention_weights"; }
    void backward(const Array& g) override {
        const Geometry& G = *geo;
        const Tensor& q = inputs[0];
        const Tensor& k = inputs[1];
        // Both requested up front: when q and k are one tensor, each group writes its dq block
        // first and then adds its dk block into the same place (beta 1 from the second request).
        const GradBuffer gq = grad_buffer(q);
        const GradBuffer gk = grad_buffer(k);
        if (!gq && !gk) return;
        const float* P = probs.data();
        const float* dA = g.data();
        const std::size_t S = G.scores();
        const auto backward_row = kernels::attention_loops().backward_row;
        parallel::parallel_for(G.G, group_grain(G), [&](std::size_t g0, std::size_t g1) {
            std::vector<float> ds(S);
            for (std::size_t gi = g0; gi < g1; ++gi) {
                softmax_backward_rows(G, gi, P + gi * S, dA + gi * S, keep.empty() ? nullptr : keep.data() + gi * S,
                                      keep_scale, ds.data(), backward_row);
                const float* qg = q.data() + G.q.at(gi, G.H);
                const float* kg = k.data() + G.k.at(gi, G.H);
                if (gq)  // dq = scale dS @ k
                    G.gemm(false, false, int(G.Lq), int(G.dk), int(G.Lk), G.scale, ds.data(), int(G.Lk), kg,
                           int(G.k.ld), gq.beta(), gq.data + G.q.at(gi, G.H), int(G.q.ld));
                if (gk)  // dk = scale dS^T @ q
                    G.gemm(true, false, int(G.Lk), int(G.dk), int(G.Lq), G.scale, ds.data(), int(G.Lk), qg,
                           int(G.q.ld), gk.beta(), gk.data + G.k.at(gi, G.H), int(G.k.ld));
            }
        });
    }
    void release_saved() override { probs = Tensor(); keep = {}; geo.reset(); }
};

// out_g = attn_g @ v_g: inputs attn (G, Lq, Lk), v.
struct AttentionApplyBackward : Node {
    std::shared_ptr<const Geometry> geo;
    const char* name() const override { return "attention_apply"; }
    void backward(const Array& g) override {
        const Geometry& G = *geo;
        const Tensor& attn = inputs[0];
        const Tensor& v = inputs[1];
        const GradBuffer ga = grad_buffer(attn);
        const GradBuffer gv = grad_buffer(v);
        const std::size_t S = G.scores();
        parallel::parallel_for(G.G, group_grain(G), [&](std::size_t g0, std::size_t g1) {
            for (std::size_t gi = g0; gi < g1; ++gi) {
                const float* dout = g.data() + G.out.at(gi, G.H);
                const float* vg = v.data() + G.v.at(gi, G.H);
                if (ga)  // dattn = dout @ v^T
                    G.gemm(false, true, int(G.Lq), int(G.Lk), int(G.dv), 1.0f, dout, int(G.out.ld), vg,
                           int(G.v.ld), ga.beta(), ga.data + gi * S, int(G.Lk));
                if (gv)  // dv = attn^T @ dout
                    G.gemm(true, false, int(G.Lk), int(G.dv), int(G.Lq), 1.0f, attn.data() + gi * S,
                           int(G.Lk), dout, int(G.out.ld), gv.beta(), gv.data + G.v.at(gi, G.H), int(G.v.ld));
            }
        });
    }
    void release_saved() override { geo.reset(); }
};

// One group's forward: P = softmax(fill(scale q_g k_g^T)) in place (with dropout, attn = P * (0 or 1/(1-p))
// into A, else A is P), then out_g = attn_g @ v_g into its heads' columns. q, k, v and out are the tensors'
// bases, addressed through the geometry's views.
void group_forward(const Geometry& G, std::size_t gi, const float* q, const float* k, const float* v, float* P, float* A,
                   const std::uint8_t* keep, float keep_scale, float* out,
                   decltype(kernels::AttentionLoops::forward_row) forward_row) {
    G.gemm(false, true, int(G.Lq), int(G.Lk), int(G.dk), G.scale, q + G.q.at(gi, G.H), int(G.q.ld), k + G.k.at(gi, G.H),
           int(G.k.ld), 0.0f, P, int(G.Lk));
    for (std::size_t i = 0; i < G.Lq; ++i) {
        float* row = P + i * G.Lk;
        G.fill_masked(row, gi, i, G.fill);
        forward_row(row, G.Lk, keep ? keep + i * G.Lk : nullptr, keep_scale, A + i * G.Lk);
    }
    G.gemm(false, false, int(G.Lq), int(G.dv), int(G.Lk), 1.0f, A, int(G.Lk), v + G.v.at(gi, G.H), int(G.v.ld), 0.0f,
           out + G.out.at(gi, G.H), int(G.out.ld));
}

// Decoding's shape: one query row per batch entry (Lq 1), the heads interleaved in rows ((b, L, H d) tensors). An
// entry's heads then go together (kernels' one_query_*): a row of keys, all heads of it, at a time, one sequential
// pass over the entry's keys and one over its values. A product per group reads the cache in d-float pieces a row
// apart, which at batch 32 left attention half again slower than its bytes' reading time.
// bf16 products round their operands as they read them (the emulated kernel's maths, on every CPU: a cache has no
// bf16 copy to feed bf16 units, and the reading, not the multiplying, bounds this).
bool one_query_rows(const Geometry& G) {
    return G.Lq == 1 && G.q.head == G.dk && G.k.head == G.dk && G.v.head == G.dv &&
           G.out.head == G.dv;
}

// Heads per work item: an entry's heads whole where there are entries enough to share out, else split so that
// each thread has a few items (batch 1: 12 heads in blocks of 2).
std::size_t heads_per_item(std::size_t H, std::size_t entries) {
    const std::size_t wanted = 4 * std::size_t(std::max(1, parallel::threads()));
    const std::size_t pieces = std::min(H, (wanted + entries - 1) / std::max<std::size_t>(1, entries));
    return (H + pieces - 1) / pieces;
}

// Heads [h0, h1) of entry e: their scores, masked and softmax'd, into p ((h1 - h0) rows of Lk; P's rows of
// those groups, consecutive), their outputs into out's columns.
void entry_forward(const Geometry& G, std::size_t e, std::size_t h0, std::size_t h1, const float* q, const float* k,
                   const float* v, float* p, float* out, const kernels::AttentionLoops& loops) {
    const std::size_t g0 = e * G.H + h0, n = G.Lk;
    loops.one_query_scores(q + G.q.at(g0, G.H), k + G.k.at(g0, G.H), G.k.ld, n, h1 - h0, G.dk, G.scale, G.bf16, p);
    for (std::size_t h = h0; h < h1; ++h) {
        float* row = p + (h - h0) * n;
        G.fill_masked(row, g0 + (h - h0), 0, G.fill);
        loops.forward_row(row, n, nullptr, 1.0f, row);
    }
    loops.one_query_apply(p, n, v + G.v.at(g0, G.H), G.v.ld, h1 - h0, G.dv, G.bf16, out + G.out.at(g0, G.H));
}

std::pair<Tensor, Tensor> fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                          std::shared_ptr<Geometry> geo, const Shape& attn_shape, const Shape& out_shape,
                                          float dropout_p, bool training) {
    const Geometry& G = *geo;
    const std::size_t S = G.scores();
    const bool drop = training && dropout_p > 0.0f;
    const bool grad = needs_grad({&q, &k, &v});
    Tensor attn(Array::from_shape(attn_shape));
    // With dropout the softmax output P is kept apart from the returned (dropped) weights.
    Tensor probs = drop ? Tensor(Array::from_shape(attn_shape)) : attn.detach();
    std::vector<std::uint8_t> keep;
    const float keep_scale = dropout_p >= 1.0f ? 0.0f : 1.0f / (1.0f - dropout_p);
    if (drop) {
        if (!(dropout_p <= 1.0f))
            throw ValueError("attention: dropout p must be a probability in [0, 1], got " + std::to_string(dropout_p));
        keep.resize(G.G * S);
        detail::dropout_keep_mask(keep.data(), keep.size(), dropout_p, default_generator().next(),
                                  distributed::global_mask_offset(keep.size(), "attention dropout"));
    }
    Tensor out(Array::from_shape(out_shape));
    float* P = probs.data();
    float* A = attn.data();
    // Each row's softmax (and dropout) takes the vector loop of the kernel level (kernels/simd/attention.cpp),
    // fetched once per op call: decoding calls this once per step.
    const kernels::AttentionLoops& loops = kernels::attention_loops();
    if (one_query_rows(G) && !drop) {
        const std::size_t entries = G.G / G.H, hb = heads_per_item(G.H, entries), pieces = (G.H + hb - 1) / hb;
        const std::size_t grain = std::max<std::size_t>(1, group_grain(G) / hb);
        parallel::parallel_for(entries * pieces, grain, [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) {
                const std::size_t e = i / pieces, h0 = (i % pieces) * hb, h1 = std::min(G.H, h0 + hb);
                entry_forward(G, e, h0, h1, q.data(), k.data(), v.data(), P + (e * G.H + h0) * S, out.data(), loops);
            }
        });
    } else {
        parallel::parallel_for(G.G, group_grain(G), [&](std::size_t g0, std::size_t g1) {
            for (std::size_t gi = g0; gi < g1; ++gi)
                group_forward(G, gi, q.data(), k.data(), v.data(), P + gi * S, A + gi * S,
                              drop ? keep.data() + gi * S : nullptr, keep_scale, out.data(), loops.forward_row);
        });
    }
    if (grad) {
        if (needs_grad({&q, &k})) {
            auto node = std::make_shared<AttentionWeightsBackward>();
            node->geo = geo;
            node->probs = probs.detach();
            node->keep = std::move(keep);
            node->keep_scale = keep_scale;
            attach(attn, node, {&q, &k});
        }
        auto node = std::make_shared<AttentionApplyBackward>();
        node->geo = geo;
        attach(out, node, {&attn, &v});
    }
    return {out, attn};
}

// The mask's offset for each group and its row / column strides, for a mask broadcasting to
// lead + (Lq, Lk), the groups being the flattened lead dimensions.
void place_mask(Geometry& geo, const Mask& mask, const Shape& lead, const char* fn) {
    Shape full = lead;
    full.push_back(geo.Lq);
    full.push_back(geo.Lk);
    const Shape& m = mask.shape;
    bool fits = m.size() <= full.size() && numel_of(m) == mask.data.size();
    for (std::size_t i = 0; fits && i < m.size(); ++i) {
        const std::size_t md = m[m.size() - 1 - i], sd = full[full.size() - 1 - i];
        fits = md == 1 || md == sd;
    }
    if (!fits)
        throw ValueError(std::string(fn) + ": mask of shape " + shape_str(m) + " must broadcast to the scores' shape " +
                         shape_str(full) + ", e.g. (b, 1, Lk) or (b, 1, Lq, Lk)");
    const auto strides = detail::broadcast_strides(m, full);
    const std::size_t r = lead.size();
    geo.mask_row = strides[r];
    geo.mask_col = strides[r + 1];
    geo.mask_group.assign(geo.G, 0);
    for (std::size_t g = 0; g < geo.G; ++g) {
        std::size_t rest = g, off = 0;
        for (std::size_t d = r; d-- > 0;) {
            off += (rest % lead[d]) * strides[d];
            rest /= lead[d];
        }
        geo.mask_group[g] = off;
    }
    geo.mask = mask.data;
    geo.has_mask = true;
}

// The composition of the seeds' code, for inputs whose leading dimensions differ (broadcast).
std::pair<Tensor, Tensor> composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Mask* mask,
                                             float dropout_p, float fill_value, bool training) {
    const float temperature = std::sqrt(float(q.size(-1)));
    Tensor scores = matmul(div_scalar(q, temperature), k, false, true);  // (..., Lq, Lk)
    if (mask) {
        const Shape s = scores.shape(),& m = mask->shape;
        bool fits = m.size() <= s.size();
        for (std::size_t i = 0; fits && i < m.size(); ++i) {
            const std::size_t md = m[m.size() - 1 - i], sd = s[s.size() - 1 - i];
            fits = md == 1 || md == sd;
        }
        if (!fits)
            throw ValueError("scaled_dot_product_attention: mask of shape " + shape_str(m) +
                             " must broadcast to the scores' shape (..., Lq, Lk) = " + shape_str(s) +
                             ", e.g. (b, 1, Lk) or (b, 1, Lq, Lk)");
        Mask masked_out{std::vector<std::uint8_t>(mask->data.size()), mask->shape};
        for (std::size_t i = 0; i < mask->data.size(); ++i) masked_out.data[i] = mask->data[i] == 0;
        scores = masked_fill(scores, masked_out, fill_value);
    }
    Tensor attn = dropout(softmax(scores, -1), dropout_p, training);
    Tensor out = matmul(attn, v);
    return {out, attn};
}

}  // namespace

std::pair<Tensor, Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                       const Mask* mask, float dropout_p, float fill_value,
                                                       bool training) {
    if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
        throw ValueError("scaled_dot_product_attention: q, k and v need rank >= 2 (..., length, dim), got q " +
                         shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()));
    if (q.size(-1) != k.size(-1))
        throw ValueError("scaled_dot_product_attention: q and k must share their last dimension d_k, got q " +
                         shape_str(q.shape()) + " and k " + shape_str(k.shape()));
    if (k.size(-2) != v.size(-2))
        throw ValueError("scaled_dot_product_attention: k and v must have the same length (dimension -2), got k " +
                         shape_str(k.shape()) + " and v " + shape_str(v.shape()));
    if (!(dropout_p >= 0.0f && dropout_p <= 1.0f))
        throw ValueError("dropout: p must be a probability in [0, 1], got " + std::to_string(dropout_p));
    const Shape sq = q.shape(), sk = k.shape(), sv = v.shape();
    const Shape lead(sq.begin(), sq.end() - 2);
    const bool same_lead = Shape(sk.begin(), sk.end() - 2) == lead && Shape(sv.begin(), sv.end() - 2) == lead;
    const std::size_t dk = sq.back(), dv = sv.back();
    if (!same_lead || dk == 0 || dv == 0) return composed_attention(q, k, v, mask, dropout_p, fill_value, training);
    // One group per flattened leading index, the matrices stored one after the other.
    auto geo = std::make_shared<Geometry>();
    geo->bf16 = autocast::enabled();
    geo->G = numel_of(lead);
    geo->H = 1;
    geo->Lq = sq[sq.size() - 2];
    geo->Lk = sk[sk.size() - 2];
    geo->dk = dk;
    geo->dv = dv;
    geo->q = {geo->Lq * dk, 0, dk};
    geo->k = {geo->Lk * dk, 0, dk};
    geo->v = {geo->Lk * dv, 0, dv};
    geo->out = {geo->Lq * dv, 0, dv};
    geo->scale = 1.0f / std::sqrt(float(dk));
    geo->fill = fill_value;
    if (mask) place_mask(*geo, *mask, lead, "scaled_dot_product_attention");
    Shape attn_shape = lead, out_shape = lead;
    attn_shape.insert(attn_shape.end(), {geo->Lq, geo->Lk});
    out_shape.insert(out_shape.end(), {geo->Lq, dv});
    return fused_attention(q, k, v, geo, attn_shape, out_shape, dropout_p, training);
}

std::pair<Tensor, Tensor> multi_head_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const AttentionConfig& c) {
    const char* fn = "multi_head_attention";
    if (c.n_head == 0) throw ValueError(std::string(fn) + ": n_head must be positive");
    if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3)
        throw ValueError(std::string(fn) + ": q, k and v must be (batch, length, n_head * d), got q " + shape_str(q.shape()) +
                         ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()));
    const std::size_t b = q.size(0), H = c.n_head;
    if (c.kv_rows) {
        if (k.size(0) != v.size(0) || k.size(1) != v.size(1) || c.kv_rows->size() != b)
            throw ValueError(std::string(fn) + ": with kv_rows, k and v must share the batch size and the length, and "
                             "kv_rows must have q's batch size " + std::to_string(b) + " entries, got k " +
                             shape_str(k.shape()) + ", v " + shape_str(v.shape()) + ", " +
                             std::to_string(c.kv_rows->size()) + " entries");
        for (std::size_t r : *c.kv_rows)
            if (r >= k.size(0))
                throw IndexError(std::string(fn) + ": kv_rows names entry " + std::to_string(r) + " of k and v, which hold " +
                                 std::to_string(k.size(0)));
        if (needs_grad({&k, &v}))
            throw ValueError(std::string(fn) + ": keys/values read through kv_rows take no gradient (a decoding cache)");
    } else if (k.size(0) != b || v.size(0) != b || k.size(1) != v.size(1)) {
        throw ValueError(std::string(fn) + ": q, k and v must share the batch size and k, v the length, got q " +
                         shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()));
    }
    if (q.size(2) != k.size(2) || q.size(2) % H != 0 || v.size(2) % H != 0 || q.size(2) == 0 || v.size(2) == 0)
        throw ValueError(std::string(fn) + ": q and k must share their last dimension, and it and v's must be positive "
                         "multiples of n_head = " + std::to_string(H) + ", got q " + shape_str(q.shape()) + ", k " +
                         shape_str(k.shape()) + ", v " + shape_str(v.shape()));
    if (!(c.dropout_p >= 0.0f && c.dropout_p <= 1.0f))
        throw ValueError(std::string(fn) + ": dropout p must be a probability in [0, 1], got " + std::to_string(c.dropout_p));
    auto geo = std::make_shared<Geometry>();
    geo->bf16 = autocast::enabled();
    geo->H = H;
    geo->G = b * H;
    geo->Lq = q.size(1);
    geo->Lk = c.kv_length ? c.kv_length : k.size(1);
    if (geo->Lk > k.size(1))
        throw ValueError(std::string(fn) + ": kv_length " + std::to_string(c.kv_length) + " is more than the " +
                         std::to_string(k.size(1)) + " positions k and v hold");
    if (geo->Lk < k.size(1) && needs_grad({&k, &v}))   // the backward would leave the unused room unwritten
        throw ValueError(std::string(fn) + ": keys/values read up to kv_length take no gradient (a decoding cache); "
                         "pass k and v of exactly the attended length");
    geo->dk = q.size(2) / H;
    geo->dv = v.size(2) / H;
    if (c.causal && geo->Lk < geo->Lq)
        throw ValueError(std::string(fn) + ": causal attention needs at least as many keys as queries, got " +
                         std::to_string(geo->Lk) + " keys and " + std::to_string(geo->Lq) + " queries");
    geo->q = {geo->Lq * H * geo->dk, geo->dk, H * geo->dk};
    geo->k = {k.size(1) * H * geo->dk, geo->dk, H * geo->dk};   // a batch entry spans all k.size(1) positions
    geo->v = {v.size(1) * H * geo->dv, geo->dv, H * geo->dv};
    if (c.kv_rows) {  // the geometry outlives this call (the backward's for q): it keeps its own copy
        geo->kv_rows = *c.kv_rows;
        geo->k.rows = geo->v.rows = geo->kv_rows.data();
    }
    geo->out = {geo->Lq * H * geo->dv, geo->dv, H * geo->dv};
    geo->scale = c.scale;
    geo->fill = c.fill_value;
    geo->causal = c.causal;
    if (c.mask) place_mask(*geo, *c.mask, {b, H}, fn);
    return fused_attention(q, k, v, geo, {b, H, geo->Lq, geo->Lk}, {b, geo->Lq, H * geo->dv}, c.dropout_p, c.training);
}

Tensor attend_cached(const Tensor& q, const std::vector<CachedSequence>& sequences, std::size_t n_head, float scale) {
    const char* fn = "attend_cached";
    if (n_head == 0) throw ValueError(std::string(fn) + ": n_head must be positive");
    if (q.dim() != 3 || q.size(1) != 1 || q.size(2) == 0 || q.size(2) % n_head != 0)
        throw ValueError(std::string(fn) + ": q must be (rows, 1, n_head * d_k) with n_head = " + std::to_string(n_head) +
                         ", got " + shape_str(q.shape()));
    const std::size_t H = n_head, dk = q.size(2) / H, rows = q.size(0);
    std::size_t dv = 0, covered = 0;
    // One geometry per sequence (its own Lk and storage); a work item is heads [h0, h0 + hb) of one row of one
    // sequence (entry_forward: the geometries are decoding's).
    std::vector<Geometry> geos(sequences.size());
    const std::size_t hb = heads_per_item(H, rows);
    std::vector<std::array<std::size_t, 3>> pieces;   // (sequence, entry of it, first head)
    std::size_t max_length = 0, cost = 0;
    for (std::size_t s = 0; s < sequences.size(); ++s) {
        const CachedSequence& c = sequences[s];
        if (!c.k || !c.v || c.k->dim() != 3 || c.v->dim() != 3 || c.k->size(2) != H * dk || c.v->size(2) % H != 0 ||
            c.k->size(0) != c.v->size(0) || c.k->size(1) != c.v->size(1) || c.length == 0 || c.length > c.k->size(1))
            throw ValueError(std::string(fn) + ": sequence " + std::to_string(s) + "'s keys/values must be (rows, capacity "
                             ">= length >= 1, n_head * d) with d_k = " + std::to_string(dk));
        if (c.begin != covered || c.end <= c.begin || c.end > rows)
            throw ValueError(std::string(fn) + ": the sequences must own consecutive, non-empty row ranges of q's " +
                             std::to_string(rows) + " rows, in order");
        covered = c.end;
        const std::size_t n = c.end - c.begin;
        if (c.row_map ? c.row_map->size() != n : c.k->size(0) != n)
            throw ValueError(std::string(fn) + ": sequence " + std::to_string(s) + " owns " + std::to_string(n) +
                             " rows but its keys/values (or row map) hold another count");
        if (c.row_map)
            for (std::size_t r : *c.row_map)
                if (r >= c.k->size(0)) throw IndexError(std::string(fn) + ": a row map names a row past the cache's");
        if (s == 0) dv = c.v->size(2) / H;
        if (c.v->size(2) != H * dv) throw ValueError(std::string(fn) + ": every sequence's values must have one width");
        Geometry& g = geos[s];
        g.bf16 = autocast::enabled();
        g.H = H;
        g.G = n * H;
        g.Lq = 1;
        g.Lk = c.length;
        g.dk = dk;
        g.dv = dv;
        g.q = {H * dk, dk, H * dk};
        g.k = {c.k->size(1) * H * dk, dk, H * dk, c.row_map ? c.row_map->data() : nullptr};
        g.v = {c.v->size(1) * H * dv, dv, H * dv, c.row_map ? c.row_map->data() : nullptr};
        g.out = {H * dv, dv, H * dv};
        g.scale = scale;
        for (std::size_t e = 0; e < n; ++e)
            for (std::size_t h0 = 0; h0 < H; h0 += hb) pieces.push_back({s, e, h0});
        max_length = std::max(max_length, c.length);
        cost += g.G * (c.length * (dk + dv + 24) + 1500);
    }
    if (covered != rows)
        throw ValueError(std::string(fn) + ": the sequences own " + std::to_string(covered) + " of q's " +
                         std::to_string(rows) + " rows");
    Tensor out(Array::from_shape({rows, 1, H * dv}));
    if (pieces.empty()) return out;
    const kernels::AttentionLoops& loops = kernels::attention_loops();
    const std::size_t grain = std::max<std::size_t>(1, (std::size_t(1) << 18) / std::max<std::size_t>(1, hb * cost / (rows * H)));
    parallel::parallel_for(pieces.size(), grain, [&](std::size_t i0, std::size_t i1) {
        std::vector<float> scores(hb * max_length);
        for (std::size_t i = i0; i < i1; ++i) {
            const auto [s, e, h0] = pieces[i];
            const CachedSequence& c = sequences[s];
            entry_forward(geos[s], e, h0, std::min(H, h0 + hb), q.data() + c.begin * H * dk, c.k->data(), c.v->data(),
                          scores.data(), out.data() + c.begin * H * dv, loops);
        }
    });
    return out;
}

}  // namespace ct
