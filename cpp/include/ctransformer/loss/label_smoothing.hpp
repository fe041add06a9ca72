// LabelSmoothing of the Annotated Transformer, one autograd node.
// For log-probabilities x (N, size) and targets t (N,) the target distribution is
//   true_dist[i, c] = smoothing / (size - 2), true_dist[i, t_i] = 1 - smoothing,
//   true_dist[:, padding_idx] = 0, and the whole row 0 where t_i == padding_idx;
// loss = KLDivLoss(reduction='sum')(x, true_dist) = sum xlogy(td, td) - td * x, dloss/dx = -td.
#pragma once
#include <optional>

#include "ctransformer/runtime/tensor.hpp"

namespace ct {

// The distribution alone, (N, size); checks targets against size.
Tensor label_smoothing_distribution(const IndexArray& target, std::size_t size, std::int64_t padding_idx,
                                    double smoothing);

class LabelSmoothing {
public:
    LabelSmoothing(std::size_t size, std::int64_t padding_idx, double smoothing = 0.0);
    // A 0-d loss tensor; remembers the target distribution it used (true_dist()).
    Tensor forward(const Tensor& x, const IndexArray& target);
    Tensor operator()(const Tensor& x, const IndexArray& target) { return forward(x, target); }

    const std::optional<Tensor>& true_dist() const { return true_dist_; }  // empty before a call
    std::size_t size() const { return size_; }
    std::int64_t padding_idx() const { return padding_idx_; }
    double smoothing() const { return smoothing_; }
    double confidence() const { return 1.0 - smoothing_; }

private:
    std::size_t size_;
    std::int64_t padding_idx_;
    double smoothing_;
    std::optional<Tensor> true_dist_;
};

}  // namespace ct
