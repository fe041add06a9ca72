"""ctransformer vs PyTorch on this machine, in one run: training steps and greedy decoding; decoding also
against CTranslate2 float32 and int8, greedy and beam 5 (cases "*/decode-b*" and "*/beam5-b*").

    python benchmarks/run.py            # the whole suite (under 10 minutes on 2 vCPUs)
    python benchmarks/run.py --quick    # fewer repeats, no decoding of the base model at batch 32
    python benchmarks/run.py --cases small/beam5-b1,base/beam5-b32 --levels none --no-policy-check
    python benchmarks/run.py --cases gpt/train,tiny/train --no-memory
    python benchmarks/run.py --levels native,x86-64-v3   # also time ct built for other CPU levels
    python benchmarks/run.py --peer-timeout 20           # no engine's call may take over 20 s (default 60)

Both sides use 2 threads (torch.set_num_threads(2), ctransformer.set_num_threads(2)); torch runs with
OMP_WAIT_POLICY=PASSIVE (set here before torch is imported; --policy-check measures what it buys).
Times are medians of interleaved repeats after a warm-up; the ratio is torch_time / ct_time.
Results go to benchmarks/results/<date>.json and a Markdown table is printed. ct's kernels pick their level
at run time (CTRANSFORMER_KERNEL_LEVEL=avx2 runs what an AVX2 CPU runs); --levels also builds ct with the
rest of its core compiled for other -march levels (native, x86-64-v3) and times those builds against this
one (simd_levels.py).

The run survives any CPU: it always ends with its table and its JSON. An engine whose call takes longer
than --peer-timeout seconds (torch's bf16 autocast without AVX512_BF16 took 18.8 s a small step on a Zen 1,
15x its float32) is stopped, left out of the rest of its case and shown as "too slow (> N s)" (the JSON's
"too_slow_s"); a memory probe gets (steps + 1) times that. A CTranslate2 setting the CPU lacks is skipped
and named (ct2_process.fastest). An engine, probe or case that raises is recorded with its message
(the JSON's "errors" or "error") and the run goes on.
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
import traceback

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch (its OpenMP runtime reads it at start)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import level_cap  # noqa: E402

# ct capped at a smaller CPU's level: the peers too, before torch, ctransformer or a CTranslate2 worker loads.
STAND_IN = level_cap.apply()

import cases  # noqa: E402
import measure  # noqa: E402
import simd_levels  # noqa: E402

THREADS = 2
PEER_TIMEOUT_S = 60  # default --peer-timeout: above the slowest call of the suite on the machines it ran on
# (base/decode-b32's torch loop, 12-23 s on a Zen 5) with room for a slower CPU
# CTranslate2 in processes of their own on the decoding cases' weights (cases.build_post_norm_decode_ct2).
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
    med, _, _, _, dropped = time_case(cases.CASES[case], budget=0.0, max_repeats=repeats, min_repeats=repeats)
    if dropped:
        raise next(iter(dropped.values()))
    print(json.dumps({"torch_s": med["torch"], "ct_s": med["ct"]}))


def run_probe(args, env=None, timeout=None):
    """A probe's JSON line, from a fresh process; measure.TooSlow when it runs past `timeout` seconds (it is
    killed), RuntimeError when it fails."""
    try:
        out = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True,
                             env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise measure.TooSlow(timeout) from None
    if out.returncode != 0:
        raise RuntimeError(f"probe {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def why_not(error):
    """What the JSON records for an engine, probe or measure that has no figure: {"too_slow_s": its limit}
    or {"error": "Type: message"}."""
    if isinstance(error, measure.TooSlow):
        return {"too_slow_s": error.seconds}
    return {"error": f"{type(error).__name__}: {error}"}


def memory_of(case, steps=3, limit=None, dropped=()):
    """Each side's probe_memory, or why it has none (why_not): a probe may take (steps + 1) calls' worth of
    `limit` (steps, and the imports and build before them). A side `dropped` from the case's timing (too slow
    or failed there) is not probed again: its probe would take as long, or fail alike."""
    memory = {}
    for side in ("ct", "torch"):
        if side in dropped:
            memory[side] = dict(why_not(dropped[side]), not_run="dropped from the case's timing")
            continue
        try:
            memory[side] = run_probe(["--probe-memory", case, side, "--steps", str(steps)],
                                     timeout=limit * (steps + 1) if limit else None)
        except Exception as error:
            memory[side] = why_not(error)
    return memory


def policy_check(case, rounds, repeats, limit=None):
    """The case timed as in the suite (ct and torch interleaved) in fresh processes with
    OMP_WAIT_POLICY=PASSIVE and unset (libgomp's default), alternating; medians over the rounds.
    A probe may take as many calls' worth of `limit` as it makes at most (2 sides, a first call and
    `repeats` turns of up to 1 + measure.BURST calls)."""
    import statistics
    res = {"PASSIVE": [], "default": []}
    timeout = limit * 2 * (1 + repeats * (1 + measure.BURST)) if limit else None
    for _ in range(rounds):
        for policy in res:
            env = dict(os.environ)
            env.pop("OMP_WAIT_POLICY", None)
            if policy == "PASSIVE":
                env["OMP_WAIT_POLICY"] = "PASSIVE"
            res[policy].append(run_probe(["--probe-time", case, "--repeats", str(repeats)], env=env, timeout=timeout))
    return {policy: {side: statistics.median(r[side] for r in runs) for side in ("torch_s", "ct_s")}
            for policy, runs in res.items()}


# --- the suite ------------------------------------------------------------------------------------
def time_case(spec, budget, max_repeats, min_repeats=3, limit=None):
    """Medians of interleaved runs of each side (and ct's cached decoder for decoding cases; a beam case
    has ct float32 and int8 and CTranslate2's, no torch): (medians, raw times, repeats, CTranslate2 peers,
    dropped). An engine whose call runs past `limit` seconds, or raises, is dropped from the case (`dropped`:
    name -> the exception, measure.TooSlow or the error) and the others go on; a CTranslate2 peer that could
    not be set up is dropped alike.

    One warm-up round first; when a round of a decoding case takes more than a quarter of the budget,
    the warm-up round is kept as a sample instead (the allocator and caches warm within the first steps
    of a long decode) and at least 2 rounds run, else at least 3. A training case's warm-up is never a
    sample: its first step also creates the optimizer's state (Adam's moments, twice the parameters'
    memory, faulted in) and, under autocast, the parameters' bf16 copies, which no later step repeats
    (kept, it was one of the base bf16 case's 3 samples; 2026-11-25 on a Zen 4, ct's first bf16 step took
    755 ms against 668-704 for the next three)."""
    set_threads("torch")
    set_threads("ct")
    dropped = {}
    if spec["kind"] == "beam":  # ct float32 and int8 against CTranslate2's; the posts' code has no beam search
        fns = {}
        fns["ct"], ct_model = spec["build"]("ct", share=False)
        fns["ct_int8"] = spec["int8"]("ct", share=False)[0]
        add_ct2_peers(fns, spec, ct_model, limit, dropped)
        return time_fns(fns, spec, budget, max_repeats, min_repeats, limit, dropped)
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
        add_ct2_peers(fns, spec, ct_model, limit, dropped)
    return time_fns(fns, spec, budget, max_repeats, min_repeats, limit, dropped)


def add_ct2_peers(fns, spec, ct_model, limit=None, dropped=None):
    """CTranslate2 float32 and int8 on ct_model's weights, each in a process of its own (the case's "ct2" and
    "ct2_int8": cases.build_post_norm_decode_ct2), when ctranslate2 is installed. One that cannot be set up (every
    setting refused or too slow, the export failed) goes to `dropped` with its exception; the case goes on."""
    with tempfile.TemporaryDirectory() as folder:  # a translator has read its files once loaded
        for peer in CT2_PEERS:
            try:
                step = spec[peer](ct_model, folder, limit=limit) if peer in spec else None
            except Exception as error:
                if dropped is None:
                    raise
                dropped[peer] = error
                continue
            if step is not None:
                fns[peer] = step


def time_fns(fns, spec, budget, max_repeats, min_repeats, limit=None, dropped=None):
    """time_case's timing of its engines `fns` (name -> callable; CTranslate2's among CT2_PEERS); an engine
    whose call runs past `limit` or raises leaves `fns` for `dropped` (a new dict when None)."""
    dropped = {} if dropped is None else dropped
    peers = {name: {"config": fn.config, "calibration": fn.worker.timings, "worker": fn.worker}
             for name, fn in fns.items() if name in CT2_PEERS}
    first = {}
    for name, fn in list(fns.items()):
        try:
            first[name] = measure.timed(fn, measure.GAP_S, limit)
        except Exception as error:
            dropped[name] = error
            del fns[name]
    if not fns:  # every engine too slow or failed: nothing to repeat
        kill_dropped(peers, dropped)
        return {}, {}, 0, peers, dropped
    round_s = sum(measure.GAP_S + t * (1 + measure.BURST if t < measure.SHORT_S else 1) for t in first.values())
    long_rounds = round_s > budget / 4 and not spec["kind"].startswith("train")
    repeats = int(max(min(2, min_repeats) if long_rounds else min_repeats, min(max_repeats, budget / max(round_s, 1e-9))))
    med, raw = measure.interleaved(fns, repeats - (1 if long_rounds else 0), warmup=0, first=first, limit=limit,
                                   dropped=dropped)
    if long_rounds:
        import statistics
        for name in med:
            raw[name].insert(0, first[name])
            med[name] = statistics.median(raw[name])
    kill_dropped(peers, dropped)
    return med, raw, repeats, peers, dropped


def kill_dropped(peers, dropped):
    """Ends the worker of each CTranslate2 peer dropped from the timing: it may have been stopped mid-call,
    and its next answer would be that call's."""
    for name in dropped:
        if name in peers:
            peers[name]["worker"].kill()


def _config(config):
    return " ".join(f"{k}={v}" for k, v in config.items()) or "its defaults"


def fmt_s(s):
    return f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s"


def too_slow(seconds):
    return f"too slow (> {seconds:g} s)"


def recorded(what, fn, *args, **kwargs):
    """fn(*args, **kwargs), or why_not() of its exception, printed: one measure failing must not cost the
    run its table and its JSON."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        traceback.print_exc()
        got = why_not(error)
        print(f"{what}: {got.get('error') or too_slow(got['too_slow_s'])}", flush=True)
        return got


# --- a case's row: each engine's median as "<engine>_s", or the engine in "too_slow_s" or "errors" ------------
def has(r, engine):
    """Whether the engine had a place in the row's case (timed, too slow or failed)."""
    return f"{engine}_s" in r or engine in r.get("too_slow_s", {}) or engine in r.get("errors", {})


def cell(r, engine):
    """An engine's time in a row, or why it has none ("n/a": not in this case)."""
    if f"{engine}_s" in r:
        return fmt_s(r[f"{engine}_s"])
    if engine in r.get("too_slow_s", {}):
        return too_slow(r["too_slow_s"][engine])
    return "failed" if engine in r.get("errors", {}) else "n/a"


def ratio(r, top, bottom, spec=".2f", bold=True):
    """top's time over bottom's in a row, or n/a when either has none."""
    if f"{top}_s" not in r or f"{bottom}_s" not in r:
        return "n/a"
    text = f"{r[f'{top}_s'] / r[f'{bottom}_s']:{spec}}x"
    return f"**{text}**" if bold else text


def ours_for(r, peer):
    """The ct engine a CTranslate2 peer is set against: ct int8 for int8, else ct's cached decoder or ct."""
    return "ct_int8" if peer == "ct2_int8" and has(r, "ct_int8") else "ct_cached" if has(r, "ct_cached") else "ct"


def run_case(name, spec, budget, max_repeats, limit, memory):
    """One case timed (time_case) and, for training, its memory probed: its row, printed as it ends."""
    med, raw, repeats, peers, dropped = time_case(spec, budget, max_repeats=max_repeats, limit=limit)
    row = {"case": name, "kind": spec["kind"], "repeats": repeats, "raw": raw}
    row.update({f"{engine}_s": seconds for engine, seconds in med.items()})
    if "torch" in med and "ct" in med:
        row["ratio"] = med["torch"] / med["ct"]
    if "torch" in med and "ct_cached" in med:
        row["ratio_cached"] = med["torch"] / med["ct_cached"]
    for peer in peers:
        if peer in med:
            row[f"{peer}_switches"] = peers[peer]["worker"].last_switches  # of its last timed call
        row[f"{peer}_config"] = peers[peer]["config"]
        row[f"{peer}_calibration"] = peers[peer]["calibration"]
    for engine, error in dropped.items():  # too slow, or failed: named in the row, the case goes on without it
        got = why_not(error)
        if "too_slow_s" in got:
            row.setdefault("too_slow_s", {})[engine] = got["too_slow_s"]
        else:
            row.setdefault("errors", {})[engine] = got["error"]
            traceback.print_exception(type(error), error, error.__traceback__)
    if spec.get("flops"):
        row["flops"] = spec["flops"]()
        row.update({f"{side}_gflops": row["flops"] / med[side] / 1e9 for side in ("ct", "torch") if side in med})
    if spec["kind"] in ("train", "train-bf16") and memory:
        row["memory"] = memory_of(name, limit=limit, dropped=dropped)
    print(case_line(row), flush=True)
    return row


def case_line(r):
    """A case's progress line: each engine's time, or why it has none."""
    if "error" in r:
        return f"{r['case']:18s} failed: {r['error']}"
    line = f"{r['case']:18s} ct {cell(r, 'ct'):>9s}"
    if has(r, "torch"):
        line += f"  torch {cell(r, 'torch'):>9s}  torch/ct {ratio(r, 'torch', 'ct', '5.2f', bold=False)}"
    if has(r, "ct_cached"):
        line += f"  ct cached {cell(r, 'ct_cached')} ({ratio(r, 'torch', 'ct_cached', bold=False)})"
    if has(r, "ct_int8"):
        line += f"  ct int8 {cell(r, 'ct_int8')}"
    for peer, label in CT2_PEERS.items():
        if f"{peer}_s" in r:
            ours = ours_for(r, peer)
            line += (f"  {label} {fmt_s(r[f'{peer}_s'])} ({ratio(r, peer, ours, bold=False)} of "
                     f"{ours.replace('_', ' ')}; {_config(r[f'{peer}_config'])}; "
                     f"{r[f'{peer}_switches']} context switches in its last call)")
        elif has(r, peer):
            line += f"  {label} {cell(r, peer)}"
    if has(r, "ct_fp32"):
        line += (f"  ct fp32 {cell(r, 'ct_fp32')} ({ratio(r, 'ct_fp32', 'ct', bold=False)} of ct bf16)  "
                 f"torch fp32 {cell(r, 'torch_fp32')}")
    return line + f"  ({r['repeats']} repeats)"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short budgets; skip base/decode-b32")
    p.add_argument("--cases", help="comma-separated subset of: " + ", ".join(cases.CASES))
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--no-policy-check", action="store_true", help="skip the OMP_WAIT_POLICY comparison")
    p.add_argument("--budget", type=float, help="seconds of timed repeats per case")
    p.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT_S, metavar="N",
                   help="seconds one call of an engine (a training step, a decode, a CTranslate2 call) may take; "
                        "past it the engine is stopped and shown as 'too slow (> N s)', and the run goes on; a "
                        "memory probe may take (steps + 1) * N (default %(default)g; 0: no limit)")
    p.add_argument("--out", help="JSON file (default benchmarks/results/<date>.json)")
    p.add_argument("--levels", default="none",
                   help="-march levels to build and time ct at besides this build (comma-separated, e.g. "
                        "native,x86-64-v3; default none)")
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
    limit = a.peer_timeout or None
    started = time.time()
    load_before = os.getloadavg()
    import torch
    import ctransformer as ct

    # The practical limit: OpenBLAS sgemm at the base model's Linear shapes, 2 threads.
    base = cases.POST_NORM["base"]
    sgemm = recorded("OpenBLAS sgemm rate", measure.sgemm_rate, cases.post_norm_gemms(base), threads=THREADS,
                     min_time=0.05 if a.quick else 0.15)
    if "gflops" in sgemm:
        print(f"OpenBLAS sgemm at the base model's shapes, {THREADS} threads: {sgemm['gflops']:.0f} GFLOP/s", flush=True)
    bf16_gemm = recorded("ctransformer's bf16 GEMM rate", measure.bf16_gemm_rate, cases.post_norm_gemms(base),
                         threads=THREADS, min_time=0.05 if a.quick else 0.15)
    if "gflops" in bf16_gemm:
        versus = f", {bf16_gemm['gflops'] / sgemm['gflops']:.2f}x sgemm" if "gflops" in sgemm else ""
        print(f"ctransformer's bf16 GEMM ({bf16_gemm['kernel']}) at the same shapes: {bf16_gemm['gflops']:.0f} GFLOP/s"
              f"{versus}", flush=True)

    results = []
    for name in names:
        spec = cases.CASES[name]
        left = 540 - (time.time() - started)  # keep the whole suite under 10 minutes
        case_budget = budget if left > 240 else max(1.0, budget * left / 480)
        try:
            row = run_case(name, spec, case_budget, 30 if not a.quick else 10, limit, memory=not a.no_memory)
        except Exception as error:  # recorded: the other cases still run and the run still ends with its table and JSON
            traceback.print_exc()
            row = {"case": name, "kind": spec["kind"], "error": f"{type(error).__name__}: {error}"}
            print(case_line(row), flush=True)
        results.append(row)

    policy = None
    if not a.no_policy_check:
        pc = "small/train"
        policy = recorded(f"{pc} OMP_WAIT_POLICY check", policy_check, pc, rounds=1 if a.quick else 2,
                          repeats=3 if a.quick else 5, limit=limit)
        policy["case"] = pc
        if "PASSIVE" in policy:
            print(f"{pc} in fresh processes, torch / ct: OMP_WAIT_POLICY=PASSIVE {fmt_s(policy['PASSIVE']['torch_s'])} / "
                  f"{fmt_s(policy['PASSIVE']['ct_s'])}, unset {fmt_s(policy['default']['torch_s'])} / "
                  f"{fmt_s(policy['default']['ct_s'])}", flush=True)

    levels = [] if a.levels == "none" else a.levels.split(",")
    simd = None
    if levels:
        simd = recorded("the CPU-level comparison", simd_levels.compare, levels,
                        ["kernels", "tiny/train"] if a.quick else simd_levels.DEFAULT_CASES,
                        rounds=2 if a.quick else 3, repeats=5 if a.quick else 10)
        if "rows" in simd:
            print(simd_levels.table(simd), flush=True)

    date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    meta = {"date": date, "machine": platform.processor() or platform.machine(), "cpu": measure.cpu_model(),
            "cpus": os.cpu_count(),
            "threads": THREADS, "torch": torch.__version__, "ctransformer": ct.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "sgemm": sgemm, "bf16_gemm": bf16_gemm,
            "policy_check": policy, "peer_timeout_s": limit,
            "quick": a.quick, "wall_s": time.time() - started, "build": ct.build_info(), "simd_levels": simd,
            "blas": ct.build_info()["blas"], "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "stand_in": STAND_IN or None,
            "loadavg_1min": {"start": load_before[0], "end": os.getloadavg()[0]}}
    stem = datetime.datetime.now().strftime("%Y-%m-%d_%H%M") + ("_quick" if a.quick else "")
    out = a.out or measure.result_path(os.path.join(HERE, "results"), stem)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)

    print(table(results, meta))
    print(f"Wall time {meta['wall_s']:.0f} s; JSON: {os.path.relpath(out)}")


def short(message, width=300):
    """An error message on one line for the table (the JSON keeps it whole): its first and last lines."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()] or [""]
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= width else text[:width - 3] + "..."


def memory_cell(m, side, key):
    """A side's memory figure (MiB) from memory_of, or why it has none."""
    got = m.get(side, {})
    if "peak_kib" in got:
        return f"{(got.get(key) or 0) / 1024:.0f}"
    return too_slow(got["too_slow_s"]) if "too_slow_s" in got else "failed" if "error" in got else "n/a"


def table(results, meta):
    sg = (meta.get("sgemm") or {}).get("gflops")
    blas = meta.get("blas") or {}
    lines = [f"### ctransformer vs PyTorch {meta['torch']}, {meta['date']}, {meta['threads']} threads each "
             f"(torch with OMP_WAIT_POLICY={meta['omp_wait_policy']})", "",
             f"CPU: {meta.get('cpu')}. ctransformer's BLAS: {blas.get('name')} {blas.get('version')} "
             f"({blas.get('source')}), kernel core **{blas.get('core')}** (openblas_get_corename); "
             f"OPENBLAS_CORETYPE={meta.get('openblas_coretype') or '(unset)'}."]
    if meta.get("stand_in"):
        held = meta["stand_in"]
        lines += ["", f"**A stand-in for a smaller CPU**, not one: ct capped by CTRANSFORMER_KERNEL_LEVEL="
                      f"{held['kernel_level']}, its peers held to the same instruction set (benchmarks/level_cap.py: "
                      + ", ".join(f"{k}={v}" for k, v in held.items() if k != "kernel_level")
                      + "); the caches, clock and FMA units are still this CPU's."]
    measured = [r for r in results if "error" not in r]  # a failed case is listed at the end
    if any(r["kind"] == "train" for r in measured):
        lines += ["", "Training steps (forward + label-smoothed cross-entropy + backward + Adam/AdamW step):", "",
                  "| case | ct | torch | torch/ct | ct GFLOP/s | torch GFLOP/s | ct % of sgemm | peak RSS MiB ct / torch "
                  "| step rise MiB ct / torch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in measured:
        if r["kind"] != "train":
            continue
        mem = rise = ""
        if "memory" in r:
            m = r["memory"]
            mem = f"{memory_cell(m, 'ct', 'peak_kib')} / {memory_cell(m, 'torch', 'peak_kib')}"
            rise = f"{memory_cell(m, 'ct', 'step_kib')} / {memory_cell(m, 'torch', 'step_kib')}"
        gflops = {side: f"{r[f'{side}_gflops']:.1f}" if f"{side}_gflops" in r else "n/a" for side in ("ct", "torch")}
        of_sgemm = f"{100 * r['ct_gflops'] / sg:.0f}%" if "ct_gflops" in r and sg else "n/a"
        lines.append(f"| {r['case']} | {cell(r, 'ct')} | {cell(r, 'torch')} | {ratio(r, 'torch', 'ct')} | "
                     f"{gflops['ct']} | {gflops['torch']} | {of_sgemm} | {mem} | {rise} |")
    amp_rows = [r for r in measured if r["kind"] == "train-bf16"]
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
                mem = f"{memory_cell(r['memory'], 'ct', 'peak_kib')} / {memory_cell(r['memory'], 'torch', 'peak_kib')}"
            lines.append(f"| {r['case']} | {cell(r, 'ct')} | {cell(r, 'ct_fp32')} | {ratio(r, 'ct_fp32', 'ct')} | "
                         f"{cell(r, 'torch')} | {ratio(r, 'torch', 'ct')} | {cell(r, 'torch_fp32')} | "
                         f"{ratio(r, 'torch_fp32', 'ct')} | {mem} |")
        if bg.get("gflops") and sg:
            lines += ["", f"ctransformer's bf16 GEMM at the base model's training products (bf16 operands, fp32 "
                          f"accumulation, {meta['threads']} threads): {bg['gflops']:.0f} GFLOP/s, "
                          f"{bg['gflops'] / sg:.2f}x OpenBLAS sgemm's {sg:.0f}."]
    dec = [r for r in measured if r["kind"] == "decode"]
    if dec:
        lines += ["", f"Greedy decoding of {cases.DECODE_STEPS} tokens (torch: the Annotated Transformer's "
                      "full-prefix greedy loop; ct: the same loop, and ct's key/value-cached decoder in float32 and "
                      "in int8 (Module.quantize); CTranslate2 "
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
            peers = " | ".join(f"{cell(r, peer)} | {ratio(r, peer, ours_for(r, peer))}" for peer in CT2_PEERS)
            lines.append(f"| {r['case']} | {cell(r, 'ct')} | {cell(r, 'torch')} | {ratio(r, 'torch', 'ct')} | "
                         f"{cell(r, 'ct_cached')} | {ratio(r, 'torch', 'ct_cached')} | {cell(r, 'ct_int8')} | {peers} |")
    beam = [r for r in measured if r["kind"] == "beam"]
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
                cells += [cell(r, ours), f"{cell(r, peer)} | {ratio(r, peer, ours)}"]
            lines.append(f"| {r['case']} | " + " | ".join(cells) + " |")
    sgemm_text = f"{sg:.0f} GFLOP/s" if sg else f"not measured ({short(meta['sgemm'].get('error'))})"
    lines += ["", f"OpenBLAS sgemm at the base model's Linear shapes, {meta['threads']} threads, this run: "
                  f"{sgemm_text} (the practical limit). FLOPs: matmuls only, counted analytically (backward = 2x "
                  "forward). Memory: peak RSS (VmHWM) of a fresh process holding one side, and its rise over the RSS "
                  "before the first step (VmHWM reset via /proc/self/clear_refs). Machine load (1-min average, "
                  f"other users included): {meta['loadavg_1min']['start']:.1f} at the start, "
                  f"{meta['loadavg_1min']['end']:.1f} at the end."]
    simd = meta.get("simd_levels")
    if simd and "rows" in simd:
        lines += ["", f"What the CPU level of the build changes: ctransformer alone, this build against the same sources "
                      f"built for other levels (fresh processes, levels alternating, medians of {simd['rounds']} rounds; "
                      "OpenBLAS picks its own kernels at run time, so only ct's kernels differ; 'kernels' is "
                      "layer norm, GELU, dropout, softmax, cross-entropy and Adam on 8 MiB without products):", "",
                  simd_levels.table(simd)]
    pc = meta.get("policy_check")
    if pc and "PASSIVE" in pc:
        p, d = pc["PASSIVE"], pc["default"]
        lines.append(f"OMP_WAIT_POLICY, {pc['case']} timed as above in fresh processes: PASSIVE torch {fmt_s(p['torch_s'])} "
                     f"(ct {fmt_s(p['ct_s'])}); unset torch {fmt_s(d['torch_s'])} (ct {fmt_s(d['ct_s'])}).")
    return "\n".join(lines + not_measured(results, meta)) + "\n"


def not_measured(results, meta):
    """The table's closing lines on what this run could not measure, and why: engines and probes too slow
    or failed, CTranslate2 settings not timed, whole cases and measures that failed."""
    lines, slow, failures, settings = [], False, [], {}
    for r in results:
        if "error" in r:
            failures.append(f"{r['case']}: {short(r['error'])}")
            continue
        slow = slow or bool(r.get("too_slow_s"))
        failures += [f"{r['case']} {engine}: {short(message)}" for engine, message in r.get("errors", {}).items()]
        for side, m in (r.get("memory") or {}).items():
            slow = slow or "too_slow_s" in m
            if "error" in m:
                failures.append(f"{r['case']} memory probe of {side}: {short(m['error'])}")
        for peer in CT2_PEERS:
            for t in r.get(f"{peer}_calibration") or []:
                why = t.get("skipped") or (too_slow(t["too_slow_s"]) if "too_slow_s" in t else None)
                if why:
                    settings.setdefault(f"{_config(t['config'])}: {short(why)}", []).append(f"{r['case']} {peer}")
    for what in ("sgemm", "bf16_gemm", "policy_check", "simd_levels"):
        got = meta.get(what) or {}
        if "error" in got or "too_slow_s" in got:
            failures.append(f"{what}: {short(got.get('error')) if 'error' in got else too_slow(got['too_slow_s'])}")
    if slow:
        limit = meta.get("peer_timeout_s") or 0
        lines += ["", f"too slow (> N s): an engine's call ran past --peer-timeout ({limit:g} s) and it was stopped "
                      "and left out of the rest of its case (a memory probe may take (steps + 1) times that); the "
                      "JSON's \"too_slow_s\"."]
    if settings:
        lines += ["", "CTranslate2 settings not timed on this CPU (ct2_process.fastest; the JSON's "
                      "\"<peer>_calibration\"): " + "; ".join(f"{what} ({', '.join(where)})"
                                                            for what, where in settings.items()) + "."]
    if failures:
        lines += ["", "Failed (the JSON's \"error\" and \"errors\" hold the whole messages):", ""]
        lines += [f"- {failure}" for failure in failures]
    return lines


if __name__ == "__main__":
    main()
