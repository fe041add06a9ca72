"""Attention's per-head products: today's loop of sgemm calls over (batch, head) against OpenBLAS 0.3.34's
batched calls, at the tiny, small and base shapes (issue 19, item 6).

    python benchmarks/attention_batched.py

ctransformer keeps q, k, v in the projections' (b, L, H*d) layout and runs one (batch, head) group at a time:
scores = scale q_g k_g^T (Lq x Lk x d), softmax in place while the scores are in cache, then out_g = P_g v_g
into the head's columns. Timed here, on one thread as ct calls OpenBLAS (ct's pool splits groups across
threads itself), are just the two forward products of all groups, three ways:
  loop     b*H cblas_sgemm calls (today);
  strided  b calls of cblas_sgemm_batch_strided, one per batch entry over its H heads (the heads of one
           entry are d floats apart; consecutive entries are L*H*d apart, so (b, h) is not one stride);
  batch    one cblas_sgemm_batch call with pointer arrays over all b*H groups.
Best of 7 rounds of 200 repetitions each, microseconds per forward's products; the same binary runs all three,
alternating, so load from elsewhere hits each alike.
"""
import pathlib
import subprocess
import sys
import tempfile

SOURCE = r"""
#include <cblas.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define F(name) scipy_##name
using clk = std::chrono::steady_clock;
int main(int argc, char** argv) {
    const int b = atoi(argv[1]), L = atoi(argv[2]), H = atoi(argv[3]), d = atoi(argv[4]);
    F(openblas_set_num_threads)(1);
    const int ld = H * d;
    std::vector<float> q(size_t(b) * L * ld), k(q.size()), v(q.size()), out(q.size()), s(size_t(b) * H * L * L);
    for (size_t i = 0; i < q.size(); ++i) { q[i] = float((i * 7) % 13) / 13.0f; k[i] = float((i * 5) % 11) / 11.0f; v[i] = float((i * 3) % 7) / 7.0f; }
    const float scale = 0.125f;
    auto loop = [&] {
        for (int bi = 0; bi < b; ++bi)
            for (int h = 0; h < H; ++h) {
                const size_t off = size_t(bi) * L * ld + size_t(h) * d;
                float* sg = s.data() + (size_t(bi) * H + h) * L * L;
                F(cblas_sgemm)(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, d, scale, q.data() + off, ld, k.data() + off, ld, 0.0f, sg, L);
                F(cblas_sgemm)(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, d, L, 1.0f, sg, L, v.data() + off, ld, 0.0f, out.data() + off, ld);
            }
    };
    auto strided = [&] {
        for (int bi = 0; bi < b; ++bi) {
            const size_t off = size_t(bi) * L * ld;
            float* sg = s.data() + size_t(bi) * H * L * L;
            F(cblas_sgemm_batch_strided)(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, d, scale, q.data() + off, ld, d,
                                         k.data() + off, ld, d, 0.0f, sg, L, L * L, H);
            F(cblas_sgemm_batch_strided)(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, d, L, 1.0f, sg, L, L * L,
                                         v.data() + off, ld, d, 0.0f, out.data() + off, ld, d, H);
        }
    };
    const int G = b * H;
    std::vector<const float*> qa(G), ka(G), va(G), sa(G); std::vector<float*> sw(G), ow(G);
    for (int bi = 0; bi < b; ++bi) for (int h = 0; h < H; ++h) {
        const int g = bi * H + h; const size_t off = size_t(bi) * L * ld + size_t(h) * d;
        qa[g] = q.data() + off; ka[g] = k.data() + off; va[g] = v.data() + off; ow[g] = out.data() + off;
        sw[g] = s.data() + size_t(g) * L * L; sa[g] = sw[g];
    }
    CBLAS_TRANSPOSE nt[1] = {CblasNoTrans}, tr[1] = {CblasTrans};
    blasint Ls[1] = {L}, ds[1] = {d}, lds[1] = {ld}, gs[1] = {G};
    float scales[1] = {scale}, ones[1] = {1.0f}, zeros[1] = {0.0f};
    auto batch = [&] {
        F(cblas_sgemm_batch)(CblasRowMajor, nt, tr, Ls, Ls, ds, scales, qa.data(), lds, ka.data(), lds, zeros, sw.data(), Ls, 1, gs);
        F(cblas_sgemm_batch)(CblasRowMajor, nt, nt, Ls, ds, Ls, ones, sa.data(), Ls, va.data(), lds, zeros, ow.data(), lds, 1, gs);
    };
    double best[3] = {1e30, 1e30, 1e30};
    for (int round = 0; round < 7; ++round) {
        for (int w = 0; w < 3; ++w) {
            auto t0 = clk::now();
            for (int r = 0; r < 200; ++r) { if (w == 0) loop(); else if (w == 1) strided(); else batch(); }
            const double us = std::chrono::duration<double, std::micro>(clk::now() - t0).count() / 200;
            best[w] = std::min(best[w], us);
        }
    }
    // the three give the same numbers: check one output entry
    printf("%.2f %.2f %.2f %g\n", best[0], best[1], best[2], double(out[out.size() / 2]));
}
"""

SHAPES = {  # benchmarks/cases.py's post-norm configurations (POST_NORM): (batch, length, heads, head size)
    "tiny": (8, 50, 4, 8), "small": (32, 30, 8, 32), "base": (16, 32, 8, 64), "multi30k b64 L30": (64, 30, 8, 64),
}


def main():
    import scipy_openblas32 as sob

    with tempfile.TemporaryDirectory() as tmp:
        src, exe = pathlib.Path(tmp) / "a.cpp", pathlib.Path(tmp) / "a"
        src.write_text(SOURCE)
        subprocess.run(["g++", "-O2", "-std=c++17", "-I", sob.get_include_dir(), str(src), "-o", str(exe),
                        f"{sob.get_lib_dir()}/{sob.get_library(True)}", f"-Wl,-rpath,{sob.get_lib_dir()}"], check=True)
        print("| shape (b, L, H, d) | loop of sgemm (today) | sgemm_batch_strided | sgemm_batch | loop / strided | loop / batch |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, (b, L, H, d) in SHAPES.items():
            out = subprocess.run([str(exe), str(b), str(L), str(H), str(d)], capture_output=True, text=True,
                                 check=True).stdout.split()
            loop, strided, batch = (float(x) for x in out[:3])
            print(f"| {name} ({b}, {L}, {H}, {d}) | {loop:.0f} us | {strided:.0f} us | {batch:.0f} us | "
                  f"{loop / strided:.2f}x | {loop / batch:.2f}x |")
    print("One thread (OpenBLAS's, as ct calls it), OPENBLAS_CORETYPE as the environment has it:",
          subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OPENBLAS_CORETYPE', 'unset'))"],
                         capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
