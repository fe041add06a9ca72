"""benchmarks/run.py survives any CPU (issue 33): a CTranslate2 setting the CPU lacks, or one CTranslate2
refuses, is skipped and named; an engine slower than --peer-timeout is stopped and reported as too slow;
an engine or case that raises is recorded; and the table shows all of it. No training, no CTranslate2:
fakes stand in for the engines, so these run in seconds."""
import importlib
import os
import pathlib
import sys
import threading
import time

import pytest

from waiting import HANG

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
# An AVX2-only Zen 1: no AVX-512 subsets at all.
ZEN1_FLAGS = set("fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma bmi1 bmi2 f16c".split())


@pytest.fixture
def bench(monkeypatch):
    """The benchmarks' modules, imported as run.py imports them (plain names, benchmarks/ on sys.path), and
    gone again afterwards with the environment they set (run.py sets OMP_WAIT_POLICY, and the peers' caps
    when ct's level is capped: level_cap.py). This process's own cap is not theirs: the run imports uncapped."""
    monkeypatch.setattr(sys, "path", [str(BENCHMARKS)] + sys.path)
    saved = dict(os.environ)
    os.environ.pop("OMP_WAIT_POLICY", None)
    os.environ.pop("CTRANSFORMER_KERNEL_LEVEL", None)
    ours = ("measure", "ct2_process", "run", "cases", "simd_levels", "build_at_level", "level_cap")
    assert not any(name in sys.modules for name in ours)  # no other module of these names to shadow
    try:
        yield {name: importlib.import_module(name) for name in ("measure", "ct2_process", "run", "level_cap")}
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for name in ours:
            sys.modules.pop(name, None)


class FakeWorker:
    """Stands in for ct2_process.CT2Process: CTranslate2 refuses CT2_USE_MKL=1 (as an unknown refusal), and a
    forced ISA would mean the CPU check was skipped."""
    started = []

    def __init__(self, path, compute_type, intra_threads, config):
        FakeWorker.started.append(config)
        if config.get("CT2_USE_MKL"):
            raise RuntimeError("CTranslate2 worker: ValueError: simulated refusal")
        self.config, self.closed = config, False

    def set_source(self, tokens):
        pass

    def run(self, **options):
        return {"seconds": 0.001}

    def close(self):
        self.closed = True

    kill = close


def test_a_forced_isa_the_cpu_lacks_is_skipped_and_named_and_a_refusal_is_caught(bench, monkeypatch):
    ct2 = bench["ct2_process"]
    monkeypatch.setattr(ct2, "cpu_flags", lambda: ZEN1_FLAGS)
    monkeypatch.setattr(ct2, "CT2Process", FakeWorker)
    FakeWorker.started = []
    worker = ct2.fastest("model", "int8", 2, [["a"]], {"beam_size": 1}, calls=1, limit=5)
    assert worker.config == {}
    assert all("CT2_FORCE_CPU_ISA" not in config for config in FakeWorker.started)  # never started
    why = {ct2.describe(t["config"]): t.get("skipped") for t in worker.timings}
    assert why["its defaults"] is None
    assert why["CT2_FORCE_CPU_ISA=AVX512"].startswith("the CPU lacks avx512f")
    assert why["CT2_USE_MKL=1 CT2_FORCE_CPU_ISA=AVX512"].startswith("the CPU lacks avx512f")
    assert why["CT2_USE_MKL=1"] == "CTranslate2 refused it: CTranslate2 worker: ValueError: simulated refusal"


def test_no_setting_is_skipped_beforehand_when_the_cpu_flags_are_unknown_or_present(bench):
    ct2 = bench["ct2_process"]
    avx512 = {"CT2_FORCE_CPU_ISA": "AVX512"}
    assert ct2.missing_features(avx512, None) == []
    assert ct2.missing_features(avx512, ZEN1_FLAGS | set(ct2.ISA_FLAGS["AVX512"])) == []
    assert ct2.missing_features({}, ZEN1_FLAGS) == []


def test_ct_capped_at_avx2_holds_its_peers_to_avx2_and_no_cap_leaves_them_alone(bench, monkeypatch):
    """A stand-in for an AVX2 CPU (issue 34): with ct's kernels capped, CTranslate2 is only tried with its ISA
    forced to AVX2 (both backends), and torch, MKL, oneDNN and OpenBLAS get their AVX2 switches; a switch the
    user set stays. Uncapped, or capped at an AVX-512 level, the peers choose for themselves."""
    ct2, cap = bench["ct2_process"], bench["level_cap"]
    assert ct2.configs({}) == ct2.CONFIGS and ct2.configs({"CTRANSFORMER_KERNEL_LEVEL": "avx512_vnni"}) == ct2.CONFIGS
    for name in ("avx2", "x86-64-v3", "AVX2_VNNI"):
        assert ct2.configs({"CTRANSFORMER_KERNEL_LEVEL": name}) == [
            {"CT2_FORCE_CPU_ISA": "AVX2"}, {"CT2_USE_MKL": "1", "CT2_FORCE_CPU_ISA": "AVX2"}]
    assert all(c["CT2_FORCE_CPU_ISA"] == "GENERIC" for c in ct2.configs({"CTRANSFORMER_KERNEL_LEVEL": "portable"}))

    env = {"CTRANSFORMER_KERNEL_LEVEL": "avx2", "OPENBLAS_CORETYPE": "Zen"}
    held = cap.apply(env)
    assert env == {"CTRANSFORMER_KERNEL_LEVEL": "avx2", "OPENBLAS_CORETYPE": "Zen", "ATEN_CPU_CAPABILITY": "avx2",
                   "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # CT2_ only through configs()
    assert held["OPENBLAS_CORETYPE"] == "Zen" and held["CT2_FORCE_CPU_ISA"] == "AVX2"
    env = {"CTRANSFORMER_KERNEL_LEVEL": "avx512"}
    assert cap.apply(env) == {} and env == {"CTRANSFORMER_KERNEL_LEVEL": "avx512"}

    # fastest() tries exactly the capped settings.
    monkeypatch.setenv("CTRANSFORMER_KERNEL_LEVEL", "x86-64-v3")
    monkeypatch.setattr(ct2, "cpu_flags", lambda: ZEN1_FLAGS)
    monkeypatch.setattr(ct2, "CT2Process", FakeWorker)
    FakeWorker.started = []
    worker = ct2.fastest("model", "float32", 2, [["a"]], {"beam_size": 1}, calls=1, limit=5)
    assert FakeWorker.started == ct2.configs() and worker.config == {"CT2_FORCE_CPU_ISA": "AVX2"}


def test_when_no_setting_runs_the_peer_fails_with_every_reason(bench, monkeypatch):
    ct2 = bench["ct2_process"]
    monkeypatch.setattr(ct2, "cpu_flags", lambda: ZEN1_FLAGS)
    monkeypatch.setattr(ct2, "CT2Process", FakeWorker)
    monkeypatch.setattr(ct2, "CONFIGS", [{"CT2_USE_MKL": "1"}, {"CT2_FORCE_CPU_ISA": "AVX512"}])
    with pytest.raises(RuntimeError, match="simulated refusal.*the CPU lacks avx512f"):
        ct2.fastest("model", "int8", 2, [["a"]], {}, calls=1)


def test_an_engine_past_the_limit_is_stopped_and_dropped_and_the_others_go_on(bench):
    measure = bench["measure"]
    dropped = {}
    never = threading.Event()   # the slow call ends only when the test ends it: returning at all proves it was
    try:                        # left at its limit, whatever the clock says
        med, _ = measure.interleaved({"fast": lambda: None, "slow": lambda: never.wait(HANG),
                                      "broken": lambda: 1 / 0}, repeats=2, warmup=0, gap=0.0, limit=0.2,
                                     dropped=dropped)
        assert not never.is_set()
    finally:
        never.set()
    assert set(med) == {"fast"}
    assert isinstance(dropped["slow"], measure.TooSlow) and dropped["slow"].seconds == 0.2
    assert isinstance(dropped["broken"], ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):  # without `dropped`, as before: the error propagates
        measure.interleaved({"broken": lambda: 1 / 0}, repeats=1, warmup=0, gap=0.0)


def test_a_probe_past_its_time_is_too_slow_not_fatal(bench):
    run = bench["run"]
    with pytest.raises(bench["measure"].TooSlow):
        run.run_probe(["--probe-memory", "tiny/train", "ct"], timeout=0.05)
    memory = run.memory_of("tiny/train", limit=0.01, dropped={"torch": bench["measure"].TooSlow(0.01)})
    assert memory["ct"] == {"too_slow_s": 0.04}  # (steps + 1) * limit
    assert memory["torch"]["too_slow_s"] == 0.01 and "not_run" in memory["torch"]


def test_the_table_shows_too_slow_failed_and_skipped(bench):
    run = bench["run"]
    results = [
        {"case": "small/train-bf16", "kind": "train-bf16", "repeats": 3, "ct_s": 0.2, "ct_fp32_s": 0.3,
         "torch_fp32_s": 0.4, "too_slow_s": {"torch": 60}, "memory": {"ct": {"peak_kib": 2048, "step_kib": 1024},
                                                                       "torch": {"too_slow_s": 240}}},
        {"case": "tiny/decode-b1", "kind": "decode", "repeats": 3, "ct_s": 0.02, "torch_s": 0.09,
         "ct_cached_s": 0.003, "ct_int8_s": 0.002, "ct2_s": 0.004, "ct2_switches": 2, "ct2_config": {},
         "errors": {"ct2_int8": "RuntimeError: x"},
         "ct2_calibration": [{"config": {}, "seconds": 0.004},
                             {"config": {"CT2_FORCE_CPU_ISA": "AVX512"}, "skipped": "the CPU lacks avx512f"}]},
        {"case": "base/train", "kind": "train", "error": "ValueError: simulated"},
    ]
    meta = {"torch": "2.x", "date": "today", "threads": 2, "omp_wait_policy": "PASSIVE", "sgemm": {"gflops": 100.0},
            "bf16_gemm": {"error": "RuntimeError: no bf16"}, "loadavg_1min": {"start": 0.0, "end": 0.0},
            "peer_timeout_s": 60, "policy_check": {"too_slow_s": 2520, "case": "small/train"}}
    text = run.table(results, meta)
    assert "| small/train-bf16 | 200.0 ms | 300.0 ms | **1.50x** | too slow (> 60 s) | n/a |" in text
    assert "2 / too slow (> 240 s)" in text
    assert "| tiny/decode-b1 |" in text and "| 4.0 ms | **1.33x** | failed | n/a |" in text
    assert "CT2_FORCE_CPU_ISA=AVX512: the CPU lacks avx512f (tiny/decode-b1 ct2)" in text
    for failure in ("- base/train: ValueError: simulated", "- tiny/decode-b1 ct2_int8: RuntimeError: x",
                    "- bf16_gemm: RuntimeError: no bf16", "- policy_check: too slow (> 2520 s)"):
        assert failure in text
    assert "stand-in" not in text
    meta["stand_in"] = {"kernel_level": "avx2", "OPENBLAS_CORETYPE": "Haswell", "CT2_FORCE_CPU_ISA": "AVX2"}
    assert ("**A stand-in for a smaller CPU**, not one: ct capped by CTRANSFORMER_KERNEL_LEVEL=avx2, its peers "
            "held to the same instruction set (benchmarks/level_cap.py: OPENBLAS_CORETYPE=Haswell, "
            "CT2_FORCE_CPU_ISA=AVX2)") in run.table(results, meta)
    line = run.case_line(results[0])
    assert line.startswith("small/train-bf16   ct  200.0 ms  torch too slow (> 60 s)  torch/ct n/a")
