// The C++ core on its own, no Python: a small next-token model trained with gradient descent.
// Build: cmake -S . -B build/cpp -DCTRANSFORMER_PYTHON=OFF -DCTRANSFORMER_EXAMPLES=ON && cmake --build build/cpp
// Run:   build/cpp/train_toy            (prints the loss every 10 steps, then "final loss")
#include <cstdio>

#include "ctransformer/runtime/autograd.hpp"
#include "ctransformer/nn/embedding.hpp"
#include "ctransformer/nn/linear.hpp"
#include "ctransformer/ops.hpp"
#include "ctransformer/runtime/random.hpp"

int main() {
    ct::manual_seed(0);
    const std::size_t vocab = 10, width = 32;
    ct::nn::Embedding embed(vocab, width);
    ct::nn::Linear hidden(width, width), out(width, vocab);

    // The cycle 1 -> 2 -> ... -> 9 -> 1: each token's target is the next one.
    ct::IndexArray tokens{{}, {36}}, targets{{}, {36}};
    for (std::int64_t i = 0; i < 36; ++i) {
        tokens.data.push_back(i / 4 + 1);
        targets.data.push_back((i / 4 + 1) % 9 + 1);
    }
    std::vector<ct::Tensor> params;
    for (auto* m : std::initializer_list<ct::nn::Module*>{&embed, &hidden, &out})
        for (auto& p : m->parameters()) params.push_back(p);

    float loss_value = 0.0f;
    for (int step = 0; step <= 60; ++step) {
        ct::Tensor logits = out.forward(ct::relu(hidden.forward(embed.forward(tokens))));
        ct::Tensor loss = ct::cross_entropy(logits, targets);
        for (auto& p : params) p.zero_grad();
        loss.backward();
        for (auto& p : params) {  // plain gradient descent, lr 0.5
            const ct::Tensor g = p.grad();
            for (std::size_t i = 0; i < p.numel(); ++i) p.data()[i] -= 0.5f * g.data()[i];
        }
        loss_value = loss.item();
        if (step % 10 == 0) std::printf("step %3d  loss %.4f\n", step, loss_value);
    }
    std::printf("final loss %.4f\n", loss_value);
    return loss_value < 0.05f ? 0 : 1;
}
