// Our int8 Linear against the same Linear built on oneDNN's int8 matmul, at the decoding products of the
// Multi30k model (d_model 256, feed-forward 1024, 8000 subwords) and the base model (512, 2048).
//
// Both sides get the same float32 input and return the same float32 output:
//   ours:   ct::linear_int8 (quantise the rows, the int8 product, scale and bias in one pass);
//   oneDNN: ct::quantize_rows_int8 (the same rows), dnnl::matmul s8 x s8 -> s32 with its weights in the
//           layout it chooses (reordered once, outside the timing), then the same scale-and-bias pass.
// The int32 sums are exact on both sides, so the outputs must agree to the bit; the program checks it.
//
// Build and run (Debian's libdnnl-dev, oneDNN 2.6):
//   cmake -S . -B build/cpp -DCTRANSFORMER_PYTHON=OFF -DCTRANSFORMER_ONEDNN_BENCH=ON
//   cmake --build build/cpp --target int8_onednn && OMP_NUM_THREADS=2 build/cpp/int8_onednn
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "ctransformer/int8.hpp"
#include "ctransformer/runtime/threads.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct OneDnnLinear {
    dnnl::engine engine{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{engine};
    dnnl::matmul matmul;
    dnnl::memory weights;
    std::size_t m, n, k;

    OneDnnLinear(const ct::Int8Weight& w, std::size_t rows) : m(rows), n(w.out_features), k(w.in_features) {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        const auto M = dnnl::memory::dim(m), N = dnnl::memory::dim(n), K = dnnl::memory::dim(k);
        dnnl::memory::desc src({M, K}, dt::s8, tag::ab), wei({K, N}, dt::s8, tag::any), dst({M, N}, dt::s32, tag::ab);
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), engine);
        matmul = dnnl::matmul(pd);
        std::vector<std::int8_t> q = w.unpacked();  // (n, k) row-major: op(B) = W^T is (k, n) in "ba"
        dnnl::memory given({{K, N}, dt::s8, tag::ba}, engine, q.data());
        weights = dnnl::memory(pd.weights_desc(), engine);
        dnnl::reorder(given, weights).execute(stream, given, weights);
        stream.wait();
    }

    // acc (m, n) = q (m, k) W^T: oneDNN's part alone.
    void product(std::vector<std::int8_t>& q, std::vector<std::int32_t>& acc) {
        using dt = dnnl::memory::data_type;
        using tag = dnnl::memory::format_tag;
        const auto M = dnnl::memory::dim(m), N = dnnl::memory::dim(n), K = dnnl::memory::dim(k);
        dnnl::memory src({{M, K}, dt::s8, tag::ab}, engine, q.data()), dst({{M, N}, dt::s32, tag::ab}, engine, acc.data());
        matmul.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
        stream.wait();
    }

    void operator()(const float* x, const ct::Int8Weight& w, const float* bias, float* y, std::vector<std::int8_t>& q,
                    std::vector<float>& row_scale, std::vector<std::int32_t>& acc) {
        ct::quantize_rows_int8(x, m, k, k, q.data(), row_scale.data());
        product(q, acc);
        for (std::size_t i = 0; i < m; ++i)  // the same rounding as linear_int8's: float(acc) * (s_x * s_w) + b
            for (std::size_t j = 0; j < n; ++j)
                y[i * n + j] = float(acc[i * n + j]) * (row_scale[i] * w.scale[j]) + bias[j];
    }
};

template <class F>
double median_us(F&& f, int reps) {
    std::vector<double> t(static_cast<std::size_t>(reps));
    for (int r = 0; r < reps; ++r) {
        const auto a = clock_type::now();
        f();
        t[std::size_t(r)] = std::chrono::duration<double, std::micro>(clock_type::now() - a).count();
    }
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    return t[std::size_t(reps / 2)];
}

}  // namespace

int main() {
    ct::set_num_threads(2);
    std::printf("int8 kernel: %s; oneDNN %d.%d.%d\n", ct::int8_kernel().c_str(), dnnl_version()->major,
                dnnl_version()->minor, dnnl_version()->patch);
    std::printf("| rows | out x in | ours (us) | oneDNN Linear (us) | oneDNN / ours | its matmul alone (us) |\n"
                "|---:|---|---:|---:|---:|---:|\n");
    std::mt19937 rng(0);
    std::normal_distribution<float> normal;
    const std::size_t shapes[][2] = {{256, 256}, {1024, 256}, {256, 1024}, {8000, 256}, {512, 512}, {2048, 512}, {512, 2048}};
    bool same = true;
    for (const auto& s : shapes) {
        const std::size_t n = s[0], k = s[1];
        std::vector<float> wf(n * k), bias(n);
        for (float& v : wf) v = normal(rng) * 0.05f;
        for (float& v : bias) v = normal(rng);
        const ct::Int8Weight w = ct::quantize_weight_int8(wf.data(), n, k);
        for (std::size_t m : {1, 5, 32, 160}) {
            std::vector<float> x(m * k), ours(m * n), theirs(m * n);
            for (float& v : x) v = normal(rng);
            OneDnnLinear dnn(w, m);
            std::vector<std::int8_t> q(m * k);
            std::vector<float> row_scale(m);
            std::vector<std::int32_t> acc(m * n);
            auto run_ours = [&] { ct::linear_int8(m, x.data(), k, w, 1.0f, bias.data(), ours.data(), n); };
            auto run_theirs = [&] { dnn(x.data(), w, bias.data(), theirs.data(), q, row_scale, acc); };
            run_ours();
            run_theirs();
            same = same && ours == theirs;
            const int reps = m * n * k > (1u << 24) ? 200 : 2000;
            auto run_product = [&] { dnn.product(q, acc); };
            double a = 1e30, b = 1e30, c = 1e30;
            for (int round = 0; round < 3; ++round) {  // interleaved; the best of three medians each
                a = std::min(a, median_us(run_ours, reps));
                b = std::min(b, median_us(run_theirs, reps));
                c = std::min(c, median_us(run_product, reps));
            }
            std::printf("| %zu | %zu x %zu | %.2f | %.2f | %.2fx | %.2f |\n", m, n, k, a, b, b / a, c);
        }
    }
    std::printf(same ? "outputs identical on every shape\n" : "OUTPUTS DIFFER\n");
    return same ? 0 : 1;
}
