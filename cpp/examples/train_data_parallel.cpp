// Data-parallel training from C++ alone: train_toy's model on N processes, over MPI.
// Build: cmake -S . -B build/cpp -DCTRANSFORMER_PYTHON=OFF -DCTRANSFORMER_EXAMPLES=ON && cmake --build build/cpp
// Run:   mpirun -np 2 build/cpp/train_data_parallel    (any N that divides 36; prints "final loss" on rank 0)
//
// Every process holds the same 36-token global batch and trains on its rows. Each process's loss is
// its mean scaled by (its tokens x N / global tokens), so the GradientReducer's average over processes
// is the gradient of the global batch's mean: N processes take the same steps as one.
#include <cstdio>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/distributed/gradient_reducer.hpp"
#include "ctransformer/nn/embedding.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/ops.hpp"
#include "ctransformer/runtime/random.hpp"

int main() {
    if (!ct::distributed::available()) {
        std::printf("this build has no MPI (CTRANSFORMER_MPI): nothing to do\n");
        return 0;
    }
    ct::distributed::ProcessGroup& group = ct::distributed::ProcessGroup::world();
    const std::int64_t rank = group.rank(), world = group.size(), global = 36;
    if (global % world != 0) {
        if (rank == 0) std::fprintf(stderr, "run with a number of processes that divides %lld\n", (long long)global);
        return 2;
    }
    ct::manual_seed(0);
    const std::size_t vocab = 10, width = 32;
    ct::nn::Embedding embed(vocab, width);
    ct::nn::Linear hidden(width, width), out(width, vocab);

    // This process's rows of the cycle 1 -> 2 -> ... -> 9 -> 1 (each token's target is the next one).
    const std::int64_t rows = global / world, begin = rank * rows;
    ct::IndexArray tokens{{}, {std::size_t(rows)}}, targets{{}, {std::size_t(rows)}};
    for (std::int64_t i = begin; i < begin + rows; ++i) {
        tokens.data.push_back(i / 4 + 1);
        targets.data.push_back((i / 4 + 1) % 9 + 1);
    }
    std::vector<ct::Tensor> params;
    for (auto* m : std::initializer_list<ct::nn::Module*>{&embed, &hidden, &out})
        for (auto& p : m->parameters()) params.push_back(p);
    ct::distributed::GradientReducer reducer(params, group, /*bucket_bytes=*/4096);

    float loss_value = 0.0f;
    for (int step = 0; step <= 60; ++step) {
        ct::Tensor logits = out.forward(ct::relu(hidden.forward(embed.forward(tokens))));
        ct::Tensor loss = ct::cross_entropy(logits, targets);
        for (auto& p : params) p.zero_grad();
        ct::scale(loss, float(rows * world) / float(global)).backward();  // averaged over processes on return
        for (auto& p : params) {  // plain gradient descent, lr 0.5: the same update everywhere
            const ct::Tensor g = p.grad();
            for (std::size_t i = 0; i < p.numel(); ++i) p.data()[i] -= 0.5f * g.data()[i];
        }
        double global_loss = double(loss.item()) * double(rows) / double(global);
        group.all_reduce_sum(&global_loss, 1);
        loss_value = float(global_loss);
        if (rank == 0 && step % 10 == 0) std::printf("step %3d  loss %.6f\n", step, loss_value);
    }
    if (rank == 0)
        std::printf("final loss %.6f  (%lld processes, %zu buckets, %.1f ms waiting on communication)\n", loss_value,
                    (long long)world, reducer.stats().buckets, 1e3 * reducer.stats().wait_seconds);
    return loss_value < 0.05f ? 0 : 1;
}
