"""ctransformer vs PyTorch on this machine, in one run: training steps and greedy decoding; decoding also
against CTranslate2 float32 and int8, greedy and beam 5 (cases "*/decode-b*" and "*/beam5-b*").

    python benchmarks/run.py            # the whole suite (under 10 minutes on 2 vCPUs)
    python benchmarks/run.py --quick    # fewer repeats, no decoding of the base model at batch 32
    python benchmarks/run.py --cases small/beam5-b1,base/beam5-b32 --levels none --no-policy-check
    python benchmarks/run.py --cases gpt/train,tiny/train --no-memory
    python benchmarks/run.py --levels x86-64-v3,x86-64   # also time ct built for other CPU levels

Both sides use 2 threads (torch.set_num_threads(2), ctransformer.set_num_threads(2)); torch runs with
OMP_WAIT_POLICY=PASSIVE (set here before torch is imported; --policy-check measures what it buys).
Times are medians of interleaved repeats after a warm-up; the ratio is torch_time / ct_time.
Results go to benchmarks/results/<date>.json and a Markdown table is printed. On an AVX-512 build the
run also builds ctransformer for AVX2 (x86-64-v3) and times both builds' own kernels (simd_levels.py),
to show what AVX-512 changes; --levels names other levels, --levels none skips it.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch (its OpenMP runtime reads it at start)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cases  # noqa: E402
import measure  # noqa: E402
import simd_levels  # noqa: E402

THREADS = 2
# CTranslate2 in processes of their own on the decoding cases' weights (cases.build_a_decode_ct2).
CT2_PEERS = {"ct2": "CTranslate2 float32", "ct2_int8": "CTranslate2 int8"}


def set_threads(side):
    if side == "torch":
        import torch
        torch.set_num_threads(THREADS)
    else:
        import ctransformer as ct
        ct.set_num_threads(THREADS)


# --- subprocess probes ------------------------------------------------------------------------------
def probe_memory(case, side, steps):
    """Peak RSS of `steps` calls of one side's step, in a fresh process that holds only that side."""
    set_threads(side)
    step, _ = cases.CASES[case]["build"](side, share=False)
    before = measure.rss_kib()
    reset = measure.reset_hwm()
    for _ in range(steps):
        step()
    peak = measure.hwm_kib()
    import resource
    print(json.dumps({"peak_kib": peak, "before_kib": before, "step_kib": peak - before if reset else None,
                      "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def probe_time(case, repeats):
    """The suite's interleaved timing of one case (ct and torch) in this process, whose
    OMP_WAIT_POLICY the caller chose (for the OMP_WAIT_POLICY comparison)."""
    med, _, _, _ = time_case(cases.CASES[case], budget=0.0, max_repeats=repeats, min_repeats=repeats)
    print(json.dumps({"torch_s": med["torch"], "ct_s": med["ct"]}))


def run_probe(args, env=None):
    out = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True,
                         env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"probe {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_of(case, steps=3):
    return {side: run_probe(["--probe-memory", case, side, "--steps", str(steps)]) for side in ("ct", "torch")}


def policy_check(case, rounds, repeats):
    """The case timed as in the suite (ct and torch interleaved) in fresh processes with
    OMP_WAIT_POLICY=PASSIVE and unset (libgomp's default), alternating; medians over the rounds."""
    import statistics
    res = {"PASSIVE": [], "default": []}
    for _ in range(rounds):
        for policy in res:
            env = dict(os.environ)
            env.pop("OMP_WAIT_POLICY", None)
            if policy == "PASSIVE":
                env["OMP_WAIT_POLICY"] = "PASSIVE"
            res[policy].append(run_probe(["--probe-time", case, "--repeats", str(repeats)], env=env))
    return {policy: {side: statistics.median(r[side] for r in runs) for side in ("torch_s", "ct_s")}
            for policy, runs in res.items()}


# --- the suite ------------------------------------------------------------------------------------
def time_case(spec, budget, max_repeats, min_repeats=3):
    """Medians of interleaved runs of each side (and ct's cached decoder for decoding cases; a beam case
    has ct float32 and int8 and CTranslate2's, no torch).

    One warm-up round first; when a round of a decoding case takes more than a quarter of the budget,
    the warm-up round is kept as a sample instead (the allocator and caches warm within the first steps
    of a long decode) and at least 2 rounds run, else at least 3. A training case's warm-up is never a
    sample: its first step also creates the optimizer's state (Adam's moments, twice the parameters'
    memory, faulted in) and, under autocast, the parameters' bf16 copies, which no later step repeats
    (kept, it was one of the base bf16 case's 3 samples; 2026-11-25 on a Zen 4, ct's first bf16 step took
    755 ms against 668-704 for the next three)."""
    set_threads("torch")
    set_threads("ct")
    if spec["kind"] == "beam":  # ct float32 and int8 against CTranslate2's; the seeds have no torch beam search
        fns = {}
        fns["ct"], ct_model = spec["build"]("ct", share=False)
        fns["ct_int8"] = spec["int8"]("ct", share=False)[0]
        add_ct2_peers(fns, spec, ct_model)
        return time_fns(fns, spec, budget, max_repeats, min_repeats)
    t_step, t_model = spec["build"]("torch", share=True)
    fns = {"ct": spec["build"]("ct", share=True, torch_model=t_model)[0], "torch": t_step}
    if "fp32" in spec:  # a bf16 case: both sides' float32 steps on the same weights, in the same turns
        t32, t32_model = spec["fp32"]("torch", share=True)
        fns["torch_fp32"] = t32
        fns["ct_fp32"] = spec["fp32"]("ct", share=True, torch_model=t32_model)[0]
    if "cached" in spec:
        fns["ct_cached"], ct_model = spec["cached"]("ct", share=True, torch_model=t_model)
        if "cached_int8" in spec:
            fns["ct_int8"] = spec["cached_int8"]("ct", share=True, torch_model=t_model)[0]
        add_ct2_peers(fns, spec, ct_model)
    return time_fns(fns, spec, budget, max_repeats, min_repeats)


def add_ct2_peers(fns, spec, ct_model):
    """CTranslate2 float32 and int8 on ct_model's weights, each in a process of its own (the case's "ct2" and
    "ct2_int8": cases.build_a_decode_ct2), when ctranslate2 is installed."""
    with tempfile.TemporaryDirectory() as folder:  # a translator has read its files once loaded
        for peer in CT2_PEERS:
            step = spec[peer](ct_model, folder) if peer in spec else None
            if step is not None:
                fns[peer] = step


def time_fns(fns, spec, budget, max_repeats, min_repeats):
    """time_case's timing of its engines `fns` (name -> callable; CTranslate2's among CT2_PEERS)."""
    peers = {name: {"config": fn.config, "calibration": fn.worker.timings, "worker": fn.worker}
             for name, fn in fns.items() if name in CT2_PEERS}
    first = {name: measure.timed(fn, measure.GAP_S) for name, fn in fns.items()}
    round_s = sum(measure.GAP_S + t * (1 + measure.BURST if t < measure.SHORT_S else 1) for t in first.values())
    long_rounds = round_s > budget / 4 and not spec["kind"].startswith("train")
    repeats = int(max(min(2, min_repeats) if long_rounds else min_repeats, min(max_repeats, budget / max(round_s, 1e-9))))
    med, raw = measure.interleaved(fns, repeats - (1 if long_rounds else 0), warmup=0, first=first)
    if long_rounds:
        import statistics
        for name in fns:
            raw[name].insert(0, first[name])
            med[name] = statistics.median(raw[name])
    return med, raw, repeats, peers


def _config(config):
    return " ".join(f"{k}={v}" for k, v in config.items()) or "its defaults"


def fmt_s(s):
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short budgets; skip base/decode-b32")
    p.add_argument("--cases", help="comma-separated subset of: " + ", ".join(cases.CASES))
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--no-policy-check", action="store_true", help="skip the OMP_WAIT_POLICY comparison")
    p.add_argument("--budget", type=float, help="seconds of timed repeats per case")
    p.add_argument("--out", help="JSON file (default benchmarks/results/<date>.json)")
    p.add_argument("--levels", default="auto",
                   help="-march levels to build and time ct at besides this build (comma-separated; 'none'; "
                        "'auto' = x86-64-v3 when this build uses AVX-512)")
    p.add_argument("--probe-memory", nargs=2, metavar=("CASE", "SIDE"), help=argparse.SUPPRESS)
    p.add_argument("--probe-time", metavar="CASE", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=3, help=argparse.SUPPRESS)
    p.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.probe_memory:
        return probe_memory(a.probe_memory[0], a.probe_memory[1], a.steps)
    if a.probe_time:
        return probe_time(a.probe_time, a.repeats)

    names = a.cases.split(",") if a.cases else [n for n in cases.CASES
                                                if not (a.quick and cases.CASES[n].get("slow"))]
    unknown = [n for n in names if n not in cases.CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}; choose from {list(cases.CASES)}")
    budget = a.budget or (6.0 if a.quick else 20.0)
    started = time.time()
    load_before = os.getloadavg()
    import torch
    import ctransformer as ct

    # The practical limit: OpenBLAS sgemm at the base model's Linear shapes, 2 threads.
    base = cases.SYSTEM_A["base"]
    sgemm = measure.sgemm_rate(cases.system_a_gemms(base), threads=THREADS, min_time=0.05 if a.quick else 0.15)
    print(f"OpenBLAS sgemm at the base model's shapes, {THREADS} threads: {sgemm['gflops']:.0f} GFLOP/s", flush=True)
    bf16_gemm = measure.bf16_gemm_rate(cases.system_a_gemms(base), threads=THREADS, min_time=0.05 if a.quick else 0.15)
    print(f"ctransformer's bf16 GEMM ({bf16_gemm['kernel']}) at the same shapes: {bf16_gemm['gflops']:.0f} GFLOP/s, "
          f"{bf16_gemm['gflops'] / sgemm['gflops']:.2f}x sgemm", flush=True)

    results = []
    for name in names:
        spec = cases.CASES[name]
        left = 540 - (time.time() - started)  # keep the whole suite under 10 minutes
        case_budget = budget if left > 240 else max(1.0, budget * left / 480)
        med, raw, repeats, peers = time_case(spec, case_budget, max_repeats=30 if not a.quick else 10)
        row = {"case": name, "kind": spec["kind"], "ct_s": med["ct"], "repeats": repeats, "raw": raw}
        if "torch" in med:
            row.update(torch_s=med["torch"], ratio=med["torch"] / med["ct"])
        for extra_side in ("ct_fp32", "torch_fp32"):
            if extra_side in med:
                row[f"{extra_side}_s"] = med[extra_side]
        if "ct_cached" in med:
            row["ct_cached_s"] = med["ct_cached"]
            row["ratio_cached"] = med["torch"] / med["ct_cached"]
        if "ct_int8" in med:
            row["ct_int8_s"] = med["ct_int8"]
        for peer in CT2_PEERS:
            if peer in med:
                row[f"{peer}_s"] = med[peer]
                row[f"{peer}_switches"] = peers[peer]["worker"].last_switches  # of its last timed call
                row[f"{peer}_config"] = peers[peer]["config"]
                row[f"{peer}_calibration"] = peers[peer]["calibration"]
        if spec.get("flops"):
            flops = spec["flops"]()
            row.update(flops=flops, ct_gflops=flops / med["ct"] / 1e9, torch_gflops=flops / med["torch"] / 1e9)
        if spec["kind"] in ("train", "train-bf16") and not a.no_memory:
            row["memory"] = memory_of(name)
        results.append(row)
        extra = f"  ct cached {fmt_s(row['ct_cached_s'])} ({row['ratio_cached']:.2f}x)" if "ct_cached_s" in row else ""
        if "ct_int8_s" in row:
            extra += f"  ct int8 {fmt_s(row['ct_int8_s'])}"
        for peer, label in CT2_PEERS.items():
            if f"{peer}_s" in row:
                ours = "ct_int8" if peer == "ct2_int8" and "ct_int8_s" in row else \
                    "ct_cached" if "ct_cached_s" in row else "ct"
                extra += (f"  {label} {fmt_s(row[f'{peer}_s'])} ({row[f'{peer}_s'] / row[ours + '_s']:.2f}x of "
                          f"{ours.replace('_', ' ')}; {_config(row[f'{peer}_config'])}; "
                          f"{row[f'{peer}_switches']} context switches in its last call)")
        if "ct_fp32_s" in row:
            extra += (f"  ct fp32 {fmt_s(row['ct_fp32_s'])} ({row['ct_fp32_s'] / row['ct_s']:.2f}x of ct bf16)  "
                      f"torch fp32 {fmt_s(row['torch_fp32_s'])}")
        versus = f"  torch {fmt_s(med['torch']):>9s}  torch/ct {row['ratio']:5.2f}x" if "torch" in med else ""
        print(f"{name:18s} ct {fmt_s(med['ct']):>9s}{versus}{extra}  ({repeats} repeats)", flush=True)

    policy = None
    if not a.no_policy_check:
        pc = "small/train"
        policy = policy_check(pc, rounds=1 if a.quick else 2, repeats=3 if a.quick else 5)
        policy["case"] = pc
        print(f"{pc} in fresh processes, torch / ct: OMP_WAIT_POLICY=PASSIVE {fmt_s(policy['PASSIVE']['torch_s'])} / "
              f"{fmt_s(policy['PASSIVE']['ct_s'])}, unset {fmt_s(policy['default']['torch_s'])} / "
              f"{fmt_s(policy['default']['ct_s'])}", flush=True)

    levels = [] if a.levels == "none" else a.levels.split(",") if a.levels != "auto" else \
        ["x86-64-v3"] if ct.build_info()["float_lanes"] == 16 else []
    simd = None
    if levels:
        simd = simd_levels.compare(levels, ["kernels", "tiny/train"] if a.quick else simd_levels.DEFAULT_CASES,
                                   rounds=2 if a.quick else 3, repeats=5 if a.quick else 10)
        print(simd_levels.table(simd), flush=True)

    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    meta = {"date": date, "machine": platform.processor() or platform.machine(), "cpu": measure.cpu_model(),
            "cpus": os.cpu_count(),
            "threads": THREADS, "torch": torch.__version__, "ctransformer": ct.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "sgemm": sgemm, "bf16_gemm": bf16_gemm,
            "policy_check": policy,
            "quick": a.quick, "wall_s": time.time() - started, "build": ct.build_info(), "simd_levels": simd,
            "blas": ct.build_info()["blas"], "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "loadavg_1min": {"start": load_before[0], "end": os.getloadavg()[0]}}
    stem = datetime.datetime.now().strftime("%Y-%m-%d_%H%M") + ("_quick" if a.quick else "")
    out = a.out or measure.result_path(os.path.join(HERE, "results"), stem)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)

    print(table(results, meta))
    print(f"Wall time {meta['wall_s']:.0f} s; JSON: {os.path.relpath(out)}")


def table(results, meta):
    sg = meta["sgemm"]["gflops"]
    blas = meta.get("blas") or {}
    lines = [f"### ctransformer vs PyTorch {meta['torch']}, {meta['date']}, {meta['threads']} threads each "
             f"(torch with OMP_WAIT_POLICY={meta['omp_wait_policy']})", "",
             f"CPU: {meta.get('cpu')}. ctransformer's BLAS: {blas.get('name')} {blas.get('version')} "
             f"({blas.get('source')}), kernel core **{blas.get('core')}** (openblas_get_corename); "
             f"OPENBLAS_CORETYPE={meta.get('openblas_coretype') or '(unset)'}."]
    if any(r["kind"] == "train" for r in results):
        lines += ["", "Training steps (forward + label-smoothed cross-entropy + backward + Adam/AdamW step):", "",
                  "| case | ct | torch | torch/ct | ct GFLOP/s | torch GFLOP/s | ct % of sgemm | peak RSS MiB ct / torch "
                  "| step rise MiB ct / torch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if r["kind"] != "train":
            continue
        mem = rise = ""
        if "memory" in r:
            m = r["memory"]
            mem = f"{m['ct']['peak_kib'] / 1024:.0f} / {m['torch']['peak_kib'] / 1024:.0f}"
            rise = f"{(m['ct']['step_kib'] or 0) / 1024:.0f} / {(m['torch']['step_kib'] or 0) / 1024:.0f}"
        lines.append(f"| {r['case']} | {fmt_s(r['ct_s'])} | {fmt_s(r['torch_s'])} | **{r['ratio']:.2f}x** | "
                     f"{r['ct_gflops']:.1f} | {r['torch_gflops']:.1f} | {100 * r['ct_gflops'] / sg:.0f}% | {mem} | {rise} |")
    amp_rows = [r for r in results if r["kind"] == "train-bf16"]
    if amp_rows:
        bg = meta.get("bf16_gemm") or {}
        lines += ["", "bf16 mixed precision (each side under its own autocast: ct.autocast and torch.autocast(\"cpu\", "
                      "dtype=torch.bfloat16); float32 steps of both timed in the same turns on the same weights; "
                      f"ct's bf16 kernel: {bg.get('kernel')}; above 1, ct bf16 is faster):", "",
                  "| case | ct bf16 | ct fp32 | ct fp32/ct bf16 | torch bf16 | torch bf16/ct bf16 | torch fp32 | torch fp32/ct bf16 "
                  "| peak RSS MiB ct bf16 / torch bf16 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in amp_rows:
            mem = ""
            if "memory" in r:
                mem = f"{r['memory']['ct']['peak_kib'] / 1024:.0f} / {r['memory']['torch']['peak_kib'] / 1024:.0f}"
            lines.append(f"| {r['case']} | {fmt_s(r['ct_s'])} | {fmt_s(r['ct_fp32_s'])} | **{r['ct_fp32_s'] / r['ct_s']:.2f}x** | "
                         f"{fmt_s(r['torch_s'])} | **{r['ratio']:.2f}x** | {fmt_s(r['torch_fp32_s'])} | "
                         f"**{r['torch_fp32_s'] / r['ct_s']:.2f}x** | {mem} |")
        if bg:
            lines += ["", f"ctransformer's bf16 GEMM at the base model's training products (bf16 operands, fp32 "
                          f"accumulation, {meta['threads']} threads): {bg['gflops']:.0f} GFLOP/s, "
                          f"{bg['gflops'] / sg:.2f}x OpenBLAS sgemm's {sg:.0f}."]
    dec = [r for r in results if r["kind"] == "decode"]
    if dec:
        lines += ["", f"Greedy decoding of {cases.DECODE_STEPS} tokens (torch: seed 002's full-prefix loop; ct: the same "
                      "loop, and ct's key/value-cached decoder in float32 and in int8 (Module.quantize); CTranslate2 "
                      "float32 and int8 on the same weights, "
                      f"each in a process of its own, {THREADS} threads, its own cached decoder; engines take turns, "
                      f"each turn a {measure.GAP_S:g} s pause (no engine's idle threads spin into the next one's "
                      f"calls), then for calls under {measure.SHORT_S:g} s one untimed call and {measure.BURST} timed "
                      "ones back to back; "
                      "CTranslate2 in the fastest of its documented backend/ISA settings for each case "
                      "(ct2_process.fastest; the JSON names it). CTranslate2/ct above 1: ct is faster; CT2 float32 is "
                      "set against ct cached float32, CT2 int8 against ct int8):", "",
                  "| case | ct full prefix | torch | torch/ct | ct cached | torch/ct cached | ct int8 | CT2 float32 "
                  "| CT2 float32/ct cached | CT2 int8 | CT2 int8/ct int8 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in dec:
            ours = {"ct2": r["ct_cached_s"], "ct2_int8": r.get("ct_int8_s", r["ct_cached_s"])}
            peers = " | ".join(f"{fmt_s(r[f'{peer}_s'])} | **{r[f'{peer}_s'] / ours[peer]:.2f}x**"
                               if f"{peer}_s" in r else "n/a | n/a" for peer in CT2_PEERS)
            int8 = fmt_s(r["ct_int8_s"]) if "ct_int8_s" in r else "n/a"
            lines.append(f"| {r['case']} | {fmt_s(r['ct_s'])} | {fmt_s(r['torch_s'])} | **{r['ratio']:.2f}x** | "
                         f"{fmt_s(r['ct_cached_s'])} | **{r['ratio_cached']:.2f}x** | {int8} | {peers} |")
    beam = [r for r in results if r["kind"] == "beam"]
    if beam:
        lines += ["", f"Beam search, beam {cases.BEAM}, {cases.DECODE_STEPS} tokens (every search runs them all), "
                      "the greedy cases' sources and weights: ct's batched beam search (GNMT length penalty "
                      f"{cases.ALPHA}) in float32 and int8, CTranslate2's (length_penalty {cases.ALPHA}) in float32 "
                      "and int8, taking turns as above. CTranslate2/ct above 1: ct is faster:", "",
                  "| case | ct float32 | CT2 float32 | CT2 float32/ct float32 | ct int8 | CT2 int8 | CT2 int8/ct int8 |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in beam:
            cells = []
            for ours, peer in (("ct", "ct2"), ("ct_int8", "ct2_int8")):
                cells.append(fmt_s(r[f"{ours}_s"]))
                cells.append(f"{fmt_s(r[f'{peer}_s'])} | **{r[f'{peer}_s'] / r[f'{ours}_s']:.2f}x**"
                             if f"{peer}_s" in r else "n/a | n/a")
            lines.append(f"| {r['case']} | " + " | ".join(cells) + " |")
    lines += ["", f"OpenBLAS sgemm at the base model's Linear shapes, {meta['threads']} threads, this run: "
                  f"{sg:.0f} GFLOP/s (the practical limit). FLOPs: matmuls only, counted analytically (backward = 2x "
                  "forward). Memory: peak RSS (VmHWM) of a fresh process holding one side, and its rise over the RSS "
                  "before the first step (VmHWM reset via /proc/self/clear_refs). Machine load (1-min average, "
                  f"other users included): {meta['loadavg_1min']['start']:.1f} at the start, "
                  f"{meta['loadavg_1min']['end']:.1f} at the end."]
    simd = meta.get("simd_levels")
    if simd:
        lines += ["", f"What the CPU level of the build changes: ctransformer alone, this build against the same sources "
                      f"built for other levels (fresh processes, levels alternating, medians of {simd['rounds']} rounds; "
                      "OpenBLAS picks its own kernels at run time, so only ct's kernels differ; 'kernels' is "
                      "layer norm, GELU, dropout, softmax, cross-entropy and Adam on 8 MiB without products):", "",
                  simd_levels.table(simd)]
    pc = meta.get("policy_check")
    if pc:
        p, d = pc["PASSIVE"], pc["default"]
        lines.append(f"OMP_WAIT_POLICY, {pc['case']} timed as above in fresh processes: PASSIVE torch {fmt_s(p['torch_s'])} "
                     f"(ct {fmt_s(p['ct_s'])}); unset torch {fmt_s(d['torch_s'])} (ct {fmt_s(d['ct_s'])}).")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
