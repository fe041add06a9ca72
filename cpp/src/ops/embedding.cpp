#include "ctransformer/ops/embedding.hpp"

#include <algorithm>
#include <cstring>

#include "../runtime/parallel.hpp"

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct {

namespace {

// dweight[id] += g for every looked-up id except the padding row.
struct EmbeddingBackward : Node {
    IndexArray ids;
    std::int64_t padding = -1;  // -1: none
    const char* name() const override { return "embedding"; }
    void backward(const Array& g) override {
        GradBuffer gw = grad_buffer(inputs[0]);
        if (!gw) return;
        const std::size_t V = inputs[0].size(0), D = inputs[0].size(1);
        // Threads take disjoint column ranges, so no two add into the same element.
        const std::size_t grain = std::max<std::size_t>(8, 65536 / std::max<std::size_t>(ids.numel() + V, 1));
        parallel::parallel_for(D, grain, [&](std::size_t j0, std::size_t j1) {
            if (!gw.accumulate)
                for (std::size_t v = 0; v < V; ++v) std::fill(gw.data + v * D + j0, gw.data + v * D + j1, 0.0f);
            for (std::size_t i = 0; i < ids.numel(); ++i) {
                const std::int64_t id = ids.data[i];
                if (id == padding) continue;
                float* row = gw.data + std::size_t(id) * D;
                const float* gi = g.data() + i * D;
                for (std::size_t j = j0; j < j1; ++j) row[j] += gi[j];
            }
        });
    }
    void release_saved() override { ids = IndexArray(); }
};

}  // namespace

Tensor embedding(const IndexArray& ids, const Tensor& weight, std::optional<std::int64_t> padding_idx) {
    const std::int64_t V = weight.dim() == 2 ? std::int64_t(weight.size(0)) : 0;
    if (weight.dim() == 2)
        for (std::size_t i = 0; i < ids.numel(); ++i)
            if (ids.data[i] < 0 || ids.data[i] >= V)
                throw IndexError("embedding: token id " + std::to_string(ids.data[i]) + " at flat position " +
                                 std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    return detail::embedding_of_valid_ids(ids, weight, padding_idx);
}

Tensor detail::embedding_of_valid_ids(const IndexArray& ids, const Tensor& weight, std::optional<std::int64_t> padding_idx) {
    if (weight.dim() != 2)
        throw ValueError("embedding: weight must have rank 2 (num_embeddings, embedding_dim), got shape " +
                         shape_str(weight.shape()));
    const std::int64_t V = std::int64_t(weight.size(0));
    const std::size_t D = weight.size(1);
    std::int64_t padding = -1;
    if (padding_idx) {
        padding = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
        if (padding < 0 || padding >= V)
            throw IndexError("embedding: padding_idx must be within num_embeddings = " + std::to_string(V) + ", got " +
                             std::to_string(*padding_idx));
    }
    Shape out_shape = ids.shape;
    out_shape.push_back(D);
    Tensor out(Array::from_shape(out_shape));
    float* po = out.data();
    const float* pw = weight.data();
    parallel::parallel_for(ids.numel(), std::max<std::size_t>(1, 65536 / std::max<std::size_t>(D, 1)),
                           [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) std::memcpy(po + i * D, pw + std::size_t(ids.data[i]) * D, D * sizeof(float));
    });
    if (needs_grad({&weight})) {
        auto node = std::make_shared<EmbeddingBackward>();
        node->ids = ids;
        node->padding = padding;
        attach(out, node, {&weight});
    }
    return out;
}

}  // namespace ct
