// Gradient averaging for data-parallel training, overlapped with backward (PyTorch DDP's Reducer).
//
// The parameters are grouped into buckets of about `bucket_bytes`, in reverse order of
// registration, since backward produces the last layers' gradients first. A hook on each parameter
// (register_post_accumulate_grad_hook) copies its gradient into its bucket's flat buffer the moment
// the gradient is complete; a full bucket starts a non-blocking all-reduce (MPI_Iallreduce) at once,
// so communication runs while backward computes the earlier layers. At the end of backward the
// reducer waits for the rest and writes the average over processes back into every .grad: when
// loss.backward() returns, every process holds the same averaged gradients, ready for clipping and
// the optimizer step.
//
// Buckets start strictly in order (every process must start the same reductions in the same
// order). A parameter that got no gradient in this pass contributes zeros and keeps .grad empty, as
// on one process (all processes run the same graph). Construction broadcasts rank 0's parameters so
// every process starts from the same model.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctransformer/distributed/process_group.hpp"
#include "ctransformer/runtime/tensor.hpp"

namespace ct::distributed {

class GradientReducer {
public:
    struct Stats {
        std::size_t buckets = 0;          // buckets per step
        std::size_t bytes = 0;            // gradient bytes all-reduced per step
        std::vector<std::size_t> bucket_bytes;  // each bucket's, in the order they start
        std::uint64_t steps = 0;          // backward passes reduced
        double wait_seconds = 0.0;        // time backward's end spent waiting for communication, summed
    };

    GradientReducer(std::vector<Tensor> parameters, ProcessGroup& group, std::size_t bucket_bytes = 1 << 20);
    ~GradientReducer();
    GradientReducer(const GradientReducer&) = delete;
    GradientReducer& operator=(const GradientReducer&) = delete;

    const Stats& stats() const { return stats_; }
    void reset_stats();
    // Which bucket each parameter is in (parameter order), for tests and curious readers.
    std::vector<std::size_t> bucket_of() const { return bucket_of_; }

private:
    struct Bucket {
        std::vector<std::size_t> params;   // indices into params_
        std::vector<float> buffer;         // the bucket's gradients, end to end
        std::size_t waiting = 0;           // parameters not ready yet in this pass
        bool started = false;
    };
    void begin_pass();
    void on_ready(std::size_t index);
    void on_backward_end(bool completed);
    void start_ready_buckets();

    std::vector<Tensor> params_;
    ProcessGroup& group_;
    std::vector<Bucket> buckets_;
    std::vector<std::size_t> bucket_of_, offset_of_;
    std::vector<bool> ready_, had_grad_;
    std::vector<std::uint64_t> hook_ids_;
    std::uint64_t end_callback_id_ = 0;
    std::size_t next_bucket_ = 0;   // the next bucket to start
    bool in_pass_ = false;
    bool broken_ = false;
    Stats stats_;
};

}  // namespace ct::distributed
