#include "ctransformer/distributed/gradient_reducer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/error.hpp"

namespace ct::distributed {

GradientReducer::GradientReducer(std::vector<Tensor> parameters, ProcessGroup& group, std::size_t bucket_bytes)
    : group_(group) {
    // One entry per distinct tensor (tied weights appear once), in registration order.
    std::unordered_set<const TensorImpl*> seen;
    for (Tensor& p : parameters) {
        if (!p.requires_grad() || !p.is_leaf())
            throw ValueError("GradientReducer: every parameter must be a leaf tensor that requires grad");
        if (seen.insert(p.impl().get()).second) params_.push_back(p);
    }
    const std::size_t n = params_.size();
    bucket_of_.assign(n, 0);
    offset_of_.assign(n, 0);
    ready_.assign(n, false);
    had_grad_.assign(n, false);
    // Reverse registration order, cut at bucket_bytes (a parameter larger than that has its own).
    const std::size_t cap = std::max<std::size_t>(bucket_bytes / sizeof(float), 1);
    for (std::size_t k = n; k-- > 0;) {
        const std::size_t size = params_[k].numel();
        if (buckets_.empty() || (buckets_.back().buffer.size() > 0 && buckets_.back().buffer.size() + size > cap))
            buckets_.emplace_back();
        Bucket& bucket = buckets_.back();
        bucket_of_[k] = buckets_.size() - 1;
        offset_of_[k] = bucket.buffer.size();
        bucket.params.push_back(k);
        bucket.buffer.resize(bucket.buffer.size() + size);
    }
    stats_.buckets = buckets_.size();
    for (const Bucket& b : buckets_) {
        stats_.bucket_bytes.push_back(b.buffer.size() * sizeof(float));
        stats_.bytes += stats_.bucket_bytes.back();
    }

    // Everyone starts from rank 0's weights.
    for (Tensor& p : params_) group_.broadcast(p.data(), p.numel(), 0);

    for (std::size_t k = 0; k < n; ++k)
        hook_ids_.push_back(register_post_accumulate_grad_hook(params_[k], [this, k](TensorImpl&) { on_ready(k); }));
    end_callback_id_ = add_backward_end_callback([this](bool completed) { on_backward_end(completed); });
}

GradientReducer::~GradientReducer() {
    remove_backward_end_callback(end_callback_id_);
    for (std::size_t k = 0; k < params_.size(); ++k) remove_post_accumulate_grad_hook(params_[k], hook_ids_[k]);
}

void GradientReducer::reset_stats() {
    stats_.steps = 0;
    stats_.wait_seconds = 0.0;
}

void GradientReducer::begin_pass() {
    if (broken_)
        throw RuntimeError("GradientReducer: an earlier backward failed halfway through its gradient reduction, so "
                           "this process is out of step with the others; the job cannot go on");
    std::fill(ready_.begin(), ready_.end(), false);
    std::fill(had_grad_.begin(), had_grad_.end(), false);
    for (Bucket& b : buckets_) {
        b.waiting = b.params.size();
        b.started = false;
    }
    next_bucket_ = 0;
    in_pass_ = true;
}

// A parameter's gradient is complete: into its bucket, and start every bucket that can start.
void GradientReducer::on_ready(std::size_t k) {
    if (!in_pass_) begin_pass();
    if (ready_[k]) return;
    ready_[k] = true;
    const std::shared_ptr<TensorImpl>& impl = params_[k].impl();
    Bucket& bucket = buckets_[bucket_of_[k]];
    float* slot = bucket.buffer.data() + offset_of_[k];
    if (impl->grad) {
        std::memcpy(slot, impl->grad->storage->data(), params_[k].numel() * sizeof(float));
        had_grad_[k] = true;
    } else {
        std::fill(slot, slot + params_[k].numel(), 0.0f);
    }
    --bucket.waiting;
    start_ready_buckets();
    group_.progress();
}

void GradientReducer::start_ready_buckets() {
    while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].waiting == 0) {
        Bucket& bucket = buckets_[next_bucket_++];
        group_.start_all_reduce_sum(bucket.buffer.data(), bucket.buffer.size());
        bucket.started = true;
    }
}

void GradientReducer::on_backward_end(bool completed) {
    if (!in_pass_) return;   // a backward pass that reached none of these parameters
    in_pass_ = false;
    if (!completed) {        // the others will wait for reductions this process never starts
        broken_ = true;
        return;
    }
    // Parameters this pass did not reach contribute zeros (every process skips the same ones).
    for (std::size_t k = 0; k < params_.size(); ++k)
        if (!ready_[k]) on_ready(k);
    const auto start = std::chrono::steady_clock::now();
    group_.wait_all();
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++stats_.steps;
    const float scale = 1.0f / float(group_.size());
    for (std::size_t k = 0; k < params_.size(); ++k) {
        if (!had_grad_[k]) continue;
        const float* from = buckets_[bucket_of_[k]].buffer.data() + offset_of_[k];
        float* to = params_[k].impl()->grad->storage->data();
        for (std::size_t i = 0, n = params_[k].numel(); i < n; ++i) to[i] = from[i] * scale;
    }
}

}  // namespace ct::distributed
