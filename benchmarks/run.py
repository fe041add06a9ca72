"""ctransformer vs PyTorch on this machine, in one run: training steps and greedy decoding.

    python benchmarks/run.py            # the whole suite (under 10 minutes on 2 vCPUs)
    python benchmarks/run.py --quick    # fewer repeats, no decoding of the base model at batch 32
    python benchmarks/run.py --cases gpt/train,tiny/train --no-memory

Both sides use 2 threads (torch.set_num_threads(2), ctransformer.set_num_threads(2)); torch runs with
OMP_WAIT_POLICY=PASSIVE (set here before torch is imported; --policy-check measures what it buys).
Times are medians of interleaved repeats after a warm-up; the ratio is torch_time / ct_time.
Results go to benchmarks/results/<date>.json and a Markdown table is printed.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch (its OpenMP runtime reads it at start)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cases  # noqa: E402
import measure  # noqa: E402

THREADS = 2


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
    """Median torch time of a case in this process (for the OMP_WAIT_POLICY comparison)."""
    set_threads("torch")
    step, _ = cases.CASES[case]["build"]("torch", share=False)
    med, _ = measure.interleaved({"torch": step}, repeats, warmup=2)
    print(json.dumps({"torch_s": med["torch"]}))


def run_probe(args, env=None):
    out = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True,
                         env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"probe {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_of(case, steps=3):
    return {side: run_probe(["--probe-memory", case, side, "--steps", str(steps)]) for side in ("ct", "torch")}


def policy_check(case, rounds, repeats):
    """torch's median step with OMP_WAIT_POLICY=PASSIVE vs unset (libgomp's default), alternating processes."""
    res = {"PASSIVE": [], "default": []}
    for _ in range(rounds):
        for policy in res:
            env = dict(os.environ)
            env.pop("OMP_WAIT_POLICY", None)
            if policy == "PASSIVE":
                env["OMP_WAIT_POLICY"] = "PASSIVE"
            res[policy].append(run_probe(["--probe-time", case, "--repeats", str(repeats)], env=env)["torch_s"])
    import statistics
    return {k: statistics.median(v) for k, v in res.items()}


# --- the suite ------------------------------------------------------------------------------------
def time_case(name, spec, budget, max_repeats, min_repeats=3):
    import torch  # noqa: F401  (imported before ct builds, as the probes do)
    set_threads("torch")
    set_threads("ct")
    t_step, t_model = spec["build"]("torch", share=True)
    c_step, _ = spec["build"]("ct", share=True, torch_model=t_model)
    # Warm-up (one call each), then as many interleaved repeats as the budget allows.
    t0 = time.perf_counter(); c_step(); tc = time.perf_counter() - t0
    t0 = time.perf_counter(); t_step(); tt = time.perf_counter() - t0
    repeats = int(max(min_repeats, min(max_repeats, budget / max(tc + tt, 1e-9))))
    med, raw = measure.interleaved({"ct": c_step, "torch": t_step}, repeats, warmup=1 if tc + tt < budget / 4 else 0)
    return med, raw, repeats


def fmt_ms(s):
    return f"{s * 1e3:.1f}" if s < 10 else f"{s:.2f} s"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short budgets; skip base/decode-b32")
    p.add_argument("--cases", help="comma-separated subset of: " + ", ".join(cases.CASES))
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--no-policy-check", action="store_true", help="skip the OMP_WAIT_POLICY comparison")
    p.add_argument("--budget", type=float, help="seconds of timed repeats per case")
    p.add_argument("--out", help="JSON file (default benchmarks/results/<date>.json)")
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
    import torch
    import ctransformer as ct

    # The practical limit: OpenBLAS sgemm at the base model's Linear shapes, 2 threads.
    base = cases.SYSTEM_A["base"]
    sgemm = measure.sgemm_rate(cases.system_a_gemms(base), threads=THREADS, min_time=0.05 if a.quick else 0.15)
    print(f"OpenBLAS sgemm at the base model's shapes, {THREADS} threads: {sgemm['gflops']:.0f} GFLOP/s", flush=True)

    results = []
    for name in names:
        spec = cases.CASES[name]
        med, raw, repeats = time_case(name, spec, spec.get("budget", budget) * (0.5 if a.quick else 1.0),
                                      max_repeats=30 if not a.quick else 10)
        # Decoding has no FLOP count here: its two sides do different work (cached vs full prefix).
        flops = spec["flops"]() if spec.get("flops") else None
        row = {"case": name, "ct_s": med["ct"], "torch_s": med["torch"], "ratio": med["torch"] / med["ct"],
               "repeats": repeats, "raw": raw, "flops": flops,
               "ct_gflops": flops / med["ct"] / 1e9 if flops else None,
               "torch_gflops": flops / med["torch"] / 1e9 if flops else None}
        if name.endswith("/train") and not a.no_memory:
            row["memory"] = memory_of(name)
        results.append(row)
        print(f"{name:18s} ct {fmt_ms(med['ct']):>9s}  torch {fmt_ms(med['torch']):>9s}  "
              f"torch/ct {row['ratio']:5.2f}x  ({repeats} repeats)", flush=True)

    policy = None
    if not a.no_policy_check:
        pc = "base/train" if "base/train" in cases.CASES else "gpt/train"
        policy = policy_check(pc, rounds=1 if a.quick else 2, repeats=3 if a.quick else 5)
        policy["case"] = pc
        print(f"torch on {pc}: OMP_WAIT_POLICY=PASSIVE {fmt_ms(policy['PASSIVE'])} ms, "
              f"unset {fmt_ms(policy['default'])} ms", flush=True)

    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    meta = {"date": date, "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "threads": THREADS, "torch": torch.__version__, "ctransformer": ct.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "sgemm": sgemm, "policy_check": policy,
            "quick": a.quick, "wall_s": time.time() - started}
    out = a.out or os.path.join(HERE, "results", datetime.datetime.now().strftime("%Y-%m-%d_%H%M") +
                                ("_quick" if a.quick else "") + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)

    print(f"\n### ctransformer vs PyTorch {torch.__version__}, {date}, {THREADS} threads each "
          f"(torch with OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')})\n")
    print("| case | ct | torch | torch/ct | ct GFLOP/s | torch GFLOP/s | ct % of sgemm | peak MiB ct / torch (step) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        mem = ""
        if "memory" in r:
            m = r["memory"]
            mem = (f"{m['ct']['peak_kib'] / 1024:.0f} / {m['torch']['peak_kib'] / 1024:.0f} "
                   f"({(m['ct']['step_kib'] or 0) / 1024:.0f} / {(m['torch']['step_kib'] or 0) / 1024:.0f})")
        rates = (f"{r['ct_gflops']:.1f} | {r['torch_gflops']:.1f} | {100 * r['ct_gflops'] / sgemm['gflops']:.0f}%"
                 if r["flops"] else "- | - | -")
        print(f"| {r['case']} | {fmt_ms(r['ct_s'])} ms | {fmt_ms(r['torch_s'])} ms | **{r['ratio']:.2f}x** | "
              f"{rates} | {mem} |")
    print(f"\nOpenBLAS sgemm limit (base shapes, {THREADS} threads): {sgemm['gflops']:.0f} GFLOP/s. "
          "FLOPs: matmuls only, counted analytically. Memory: peak RSS (VmHWM) of a fresh process holding one "
          "side, and in brackets its rise over the RSS before the first step.")
    print(f"Wall time {meta['wall_s']:.0f} s; JSON: {os.path.relpath(out)}")


if __name__ == "__main__":
    main()
