"""What the build's CPU level changes: ctransformer against itself, built for another x86-64 level.

    python benchmarks/simd_levels.py --levels native             # this (portable) build vs -march=native
    python benchmarks/simd_levels.py --levels native,x86-64-v3 --cases kernels,tiny/train

OpenBLAS picks its kernels at run time, whatever the level, and so do ctransformer's SIMD loops and products
(softmax, layer norm, GELU, ReLU, dropout, element-wise arithmetic, attention, losses, Adam, the small
products: the kernel level, the same in every build on one machine), so only the rest of the core (what the
compiler vectorises by itself outside kernels/) changes with the build's level. `--levels default` is the portable build (what
`pip install .` builds) against this one.
Each build runs in its own processes (a fresh process per case and round, the levels alternating
round by round, so load from elsewhere hits each alike); medians over the rounds.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "scripts"))

import build_at_level  # noqa: E402

DEFAULT_CASES = ["kernels", "tiny/train", "gpt/train", "small/train", "tiny/decode-b32"]
THREADS = 2


def kernels_step():
    """Forward and backward of the element-wise and row-wise kernels on 8 MiB of activations, and
    an Adam step on 2 M parameters: the code that simd.hpp vectorises, without the products."""
    import numpy as np

    import ctransformer as ct
    F = ct.functional
    rng = np.random.default_rng(0)
    x = ct.tensor(rng.standard_normal((2048, 1024)).astype(np.float32), requires_grad=True)
    w = ct.tensor(np.ones(1024, np.float32), requires_grad=True)
    b = ct.tensor(np.zeros(1024, np.float32), requires_grad=True)
    ids = rng.integers(0, 1024, size=2048)
    params = [ct.tensor(rng.standard_normal(1 << 21).astype(np.float32), requires_grad=True)]
    opt = ct.optim.Adam(params, lr=1e-3)

    def step():
        h = F.dropout(F.gelu(F.layer_norm(x, w, b)), 0.1, True)
        loss = F.cross_entropy(h, ids) + F.softmax(h, -1).sum()
        loss.backward()
        (params[0] * params[0]).sum().backward()
        opt.step()
        opt.zero_grad()
        x.zero_grad()
    return step


def probe(case, repeats):
    """Median seconds of one case's ct step in this process (whichever build PYTHONPATH gives)."""
    import cases
    import measure

    import ctransformer as ct
    ct.set_num_threads(THREADS)
    step = kernels_step() if case == "kernels" else cases.CASES[case]["build"]("ct", share=False)[0]
    med, _ = measure.interleaved({"ct": step}, repeats, warmup=2)
    print(json.dumps({"s": med["ct"], "build": ct.build_info()}))


def run_probe(package, case, repeats):
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(package), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, __file__, "--probe", case, "--repeats", str(repeats)],
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"probe {case} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(levels, case_names, rounds=3, repeats=10, log=print):
    """{"builds": {name: build_info}, "rows": [{case, <build name>: median s, ...}]}; the first build is
    the running one (the installed package, or PYTHONPATH's)."""
    packages = {"this build": None}
    for level in levels:
        log(f"building the extension for -march={level} ...")
        packages[level] = build_at_level.build(level, ROOT / "build" / f"bench-{level}")
    times = {(name, case): [] for name in packages for case in case_names}
    builds = {}
    for r in range(rounds):
        for case in case_names:
            for name, package in packages.items():
                result = run_probe(package, case, repeats)
                times[name, case].append(result["s"])
                builds[name] = result["build"]
        log(f"round {r + 1}/{rounds} done")
    rows = [{"case": case, **{name: statistics.median(times[name, case]) for name in packages}} for case in case_names]
    return {"builds": builds, "rows": rows, "rounds": rounds, "repeats": repeats}


def describe(build):
    """The build's own level (the element-wise arithmetic and the rest of the core) and its SIMD loops'
    (the kernel level in force: kernels/simd/, the same in every build of one machine)."""
    text = f"{build['simd']}, {build['float_lanes']} floats" + ("" if build["fused_multiply_add"] else ", no FMA")
    loops = build.get("loops")
    return text if loops is None else f"{text}; loops {loops['simd']} ({loops['level']})"


def table(result):
    names = list(result["builds"])
    first = names[0]
    head = "| case | " + " | ".join(f"{n} ({describe(result['builds'][n])})" for n in names) + " | " + \
        " | ".join(f"{n} / {first}" for n in names[1:]) + " |"
    lines = [head, "|---|" + "---:|" * (2 * len(names) - 1)]
    for row in result["rows"]:
        cells = [f"{row[n] * 1e3:.1f} ms" for n in names] + [f"**{row[n] / row[first]:.2f}x**" for n in names[1:]]
        lines.append(f"| {row['case']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="native", help="comma-separated -march levels to compare with this build "
                   "('native', 'default' or a -march value)")
    p.add_argument("--cases", default=",".join(DEFAULT_CASES), help="'kernels' and/or benchmark cases (benchmarks/cases.py)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--probe", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.probe:
        return probe(a.probe, a.repeats)
    result = compare(a.levels.split(","), a.cases.split(","), a.rounds, a.repeats)
    print(table(result))


if __name__ == "__main__":
    main()
