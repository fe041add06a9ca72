"""The CPU: what it is (cpu_description, for the figures' heading) and where its time goes during a level or an
offline call (CPUWatch): on this shared machine a neighbour's load moves every figure, so each says how much there
was."""
import os
import re
import subprocess
import time

# The instruction-set flags worth naming for a CPU's figures (as /proc/cpuinfo names them).
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
              "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


class CPUWatch:
    """CPU time over a level (or an offline call), from /proc: the server's (all its threads; or CTranslate2's
    worker process) and everything else's on the machine (the busy time in /proc/stat, hypervisor steal included,
    less this process's and the server's), each in % of one core, as top shows it. On this shared machine a
    neighbour's compile shows here: OpenMP's barriers (CTranslate2's) and any thread pool stall when a core is
    taken from under them.

    Ours' server time is split further: its maths threads' (the engine's, named ct-engine, and the thread pool's,
    ct-worker) and the rest (the event loop and the poller, Python). On two cores the client, the event loop and the
    maths share the machine: what the first two take at a level is what the maths lose."""
    TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    MATHS_THREADS = ("ct-engine", "ct-worker")

    def __init__(self, server_pid=None):
        self.pids = (os.getpid(), server_pid)
        self.start = self.read()

    @staticmethod
    def _ticks(stat_path):
        """utime + stime from a /proc stat file (a process's: all its threads)."""
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    @classmethod
    def _process(cls, pid):
        try:
            return cls._ticks(f"/proc/{pid}/stat")
        except (OSError, IndexError, ValueError, TypeError):
            return 0

    @classmethod
    def _maths(cls, pid):
        """utime + stime of the process's threads named in MATHS_THREADS (0 when it has none, as CTranslate2's)."""
        total = 0
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except (OSError, TypeError):
            return 0
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() not in cls.MATHS_THREADS:
                        continue
                total += cls._ticks(f"/proc/{pid}/task/{tid}/stat")
            except (OSError, IndexError, ValueError):
                continue   # a thread that ended meanwhile
        return total

    def read(self):
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
            busy = sum(v[:8]) - v[3] - v[4]   # user nice system irq softirq steal (guest is inside user)
        except (OSError, IndexError, ValueError):
            busy = 0
        server = self.pids[1]
        return (time.perf_counter(), busy, [self._process(pid) if pid else 0 for pid in self.pids],
                self._maths(server) if server else 0)

    def stop(self):
        """{"server_cpu_pct", "others_cpu_pct", "server_maths_cpu_pct" (None for a server without maths threads)}
        since the start."""
        t1, busy1, procs1, maths1 = self.read()
        t0, busy0, procs0, maths0 = self.start
        wall = max(t1 - t0, 1e-9) * self.TICK / 100.0   # ticks in 1% of one core
        mine, server = (b - a for a, b in zip(procs0, procs1))
        return {"server_cpu_pct": server / wall, "others_cpu_pct": max(0.0, busy1 - busy0 - mine - server) / wall,
                "server_maths_cpu_pct": (maths1 - maths0) / wall if maths1 else None}


def cpu_description(ct):
    model = None
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        found = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
        model = found.group(1).strip() if found else None
    except (OSError, subprocess.SubprocessError):
        pass
    import measure
    from ct2_process import cpu_flags
    flags = cpu_flags() or set()
    info = ct.build_info()
    return {"model": model or measure.cpu_model(), "simd_flags": [f for f in SIMD_FLAGS if f in flags],
            "ct_cpu": info["cpu"], "blas_core": info["blas"]["core"], "blas": info["blas"], "cores": os.cpu_count()}
