"""llama.cpp as a benchmark reference: a cached build, a GPT-2 -> GGUF converter and a timing function.

Everything comes from one PyPI sdist, llama-cpp-python==VERSION, which vendors llama.cpp (vendor/llama.cpp, the
commit is recorded in the manifest):

  build()      downloads the sdist (pip download --no-binary :all:), builds from it (a) the Python wheel with the
               CPU build options below, installed with `pip install --target` into the cache (never into the venv:
               import_llama_cpp() puts that folder on sys.path), (b) llama-server and llama-bench from the same
               vendored source with the same options, and keeps (c) the vendored convert_hf_to_gguf.py with its
               conversion/ and gguf-py/ packages. Idempotent: an entry whose manifest.json exists is reused.
  to_gguf()    a Hugging Face GPT-2 directory -> GGUF (f32, f16, q8_0), by running the vendored converter.
  time_llama() prefill and decode figures of a GGUF through llama-cpp-python.

The cache entry is CACHE/llama_cpp_python-VERSION-KEY/ (CACHE: ~/.cache/ctransformer/llama_cpp, or
$CTRANSFORMER_LLAMA_CPP_CACHE). GGML_NATIVE compiles for the building CPU (-march=native), so KEY hashes what
makes a build valid on this machine only: the machine arch, /proc/cpuinfo's flags line, the compiler and the
CMake options. A cache built on another CPU gets another KEY and is never reused here.

CLI:  python benchmarks/llama_peer.py build        builds (or finds) the entry and prints its path
      python benchmarks/llama_peer.py bench HF_DIR  converts HF_DIR to f32, f16 and q8_0 in a temporary folder and
                                                   prints time_llama()'s figures for each
"""
import argparse
import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "0.3.36"
# llama_cpp imports diskcache (llama_cache.py) at import time; the venv does not have it, so it goes into the cache's
# site folder next to llama_cpp, pinned. The other runtime dependencies (numpy, jinja2, typing-extensions) are the venv's.
DISKCACHE = "diskcache==5.6.3"
DEFAULT_CACHE = Path(os.environ.get("CTRANSFORMER_LLAMA_CPP_CACHE", "~/.cache/ctransformer/llama_cpp")).expanduser()
JOBS = 2

# The CPU build, the same for the wheel and the binaries. llama.cpp's own CPU defaults, made explicit:
# - GGML_NATIVE=ON: -march=native. It is the default, but ggml/CMakeLists.txt turns the default off when
#   SOURCE_DATE_EPOCH is set (reproducible-build environments) or when cross-compiling: saying it keeps the build native.
# - GGML_OPENMP=ON: ggml's thread pool on OpenMP (default).
# - GGML_LLAMAFILE=ON: llamafile's sgemm (tinyBLAS) for f32/f16/q8_0 matmuls (llama.cpp's default).
# - GGML_BLAS=OFF (default off Apple): llama.cpp's build docs say BLAS "may" help prompt processing at batch > 32 and
#   does not affect generation; llama-cpp-python's README lists OpenBLAS as an option, not as the CPU default. Left
#   off, as upstream ships it: ggml's own kernels (tinyBLAS, and the q8_0 dot products) are what llama.cpp users run.
# - GGML_CCACHE=OFF: the build's time in the manifest is a real compile, and nothing lands in ~/.ccache.
# - LLAMA_OPENSSL=OFF: the server is only spoken to over 127.0.0.1; no libssl dependency on other machines.
CPU_CMAKE_ARGS = (
    "-DGGML_NATIVE=ON",
    "-DGGML_OPENMP=ON",
    "-DGGML_LLAMAFILE=ON",
    "-DGGML_BLAS=OFF",
    "-DGGML_CCACHE=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
# Both builds are Release: the wheel through scikit-build-core's cmake.build-type (it ignores CMAKE_BUILD_TYPE in
# CMAKE_ARGS), the binaries through CMAKE_BUILD_TYPE.
# The wheel: llama-cpp-python's LLAVA_BUILD builds the multimodal library (mtmd), only loaded by its Llava chat
# handlers; not needed for text benchmarks.
WHEEL_CMAKE_ARGS = ("-DLLAVA_BUILD=OFF",)
# The binaries: static (one self-contained llama-server, no libllama.so beside it), no tests/examples, and no web UI:
# LLAMA_USE_PREBUILT_UI=ON (its default) would try to download the UI from Hugging Face at build time.
BIN_CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
BIN_TARGETS = ("llama-server", "llama-bench")


# ---------------------------------------------------------------------------------------------------------------
# The cache entry
# ---------------------------------------------------------------------------------------------------------------

def cpu_flags_line(cpuinfo="/proc/cpuinfo"):
    """/proc/cpuinfo's feature line ('flags' on x86, 'Features' on ARM), as written; '' where unreadable."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.split(":", 1)[0].strip() in ("flags", "Features"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return ""


def compiler_version():
    """First line of `c++ --version` and of `cmake --version` (what CMake will pick up by default)."""
    out = {}
    for tool in ("c++", "cc", "cmake"):
        try:
            out[tool] = subprocess.run([tool, "--version"], capture_output=True, text=True,
                                       check=True).stdout.splitlines()[0].strip()
        except (OSError, subprocess.CalledProcessError, IndexError):
            out[tool] = None
    return out


def cache_key():
    """What a native build depends on, hashed: a build is valid only where all of it is the same."""
    parts = {
        "version": VERSION,
        "machine": platform.machine(),
        "cpu_flags": cpu_flags_line(),
        "compiler": compiler_version(),
        "cmake_args": [CPU_CMAKE_ARGS, WHEEL_CMAKE_ARGS, BIN_CMAKE_ARGS, BIN_TARGETS, DISKCACHE],
    }
    chosen = {var: os.environ[var] for var in ("CC", "CXX") if os.environ.get(var)}
    if chosen:                                       # CMake compiles with $CC/$CXX where set
        parts["compiler_env"] = chosen
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def entry_dir(cache=DEFAULT_CACHE):
    """This machine's cache entry (built or not)."""
    return Path(cache).expanduser() / f"llama_cpp_python-{VERSION}-{platform.machine()}-{cache_key()}"


class Entry:
    """The paths of a built cache entry."""

    def __init__(self, root):
        self.root = Path(root)
        self.site = self.root / "site"                      # pip install --target: llama_cpp, diskcache
        self.bin = self.root / "bin"                        # llama-server, llama-bench
        self.server = self.bin / "llama-server"
        self.bench = self.bin / "llama-bench"
        self.convert_dir = self.root / "convert"            # convert_hf_to_gguf.py, conversion/, gguf-py/
        self.convert_script = self.convert_dir / "convert_hf_to_gguf.py"
        self.gguf_py = self.convert_dir / "gguf-py"
        self.manifest_path = self.root / "manifest.json"

    @property
    def manifest(self):
        return json.loads(self.manifest_path.read_text())

    def __repr__(self):
        return f"Entry({str(self.root)!r})"


def _run(cmd, log, cwd=None, env=None):
    """Runs cmd with its output appended to the log file; raises with the log's tail on failure."""
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        rc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                            check=False).returncode
    if rc:
        tail = Path(log).read_text(errors="replace")[-4000:]
        raise RuntimeError(f"{cmd[0]} failed ({rc}); log {log}:\n{tail}")


def _build_env():
    env = dict(os.environ)
    # SOURCE_DATE_EPOCH would silently turn GGML_NATIVE's default off (it is set explicitly anyway), and a
    # caller's CMAKE_ARGS or MAKEFLAGS must not leak into a build that the manifest says is CPU_CMAKE_ARGS.
    for var in ("SOURCE_DATE_EPOCH", "CMAKE_ARGS", "MAKEFLAGS", "CFLAGS", "CXXFLAGS", "LDFLAGS"):
        env.pop(var, None)
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(JOBS)
    return env


@contextlib.contextmanager
def _lock(path):
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cmake_cache(build_dir):
    """The options that decide the code, as the configure step left them in CMakeCache.txt."""
    # Not GGML_AVX2 and the like: under GGML_NATIVE they are unused and read OFF; the instruction sets the build
    # got are in the manifest's llama_system_info.
    keep = ("CMAKE_BUILD_TYPE", "CMAKE_CXX_COMPILER", "CMAKE_C_FLAGS_RELEASE", "CMAKE_CXX_FLAGS_RELEASE",
            "BUILD_SHARED_LIBS", "GGML_NATIVE", "GGML_OPENMP", "GGML_LLAMAFILE", "GGML_BLAS", "GGML_CPU_REPACK",
            "GGML_BACKEND_DL", "LLAVA_BUILD")
    out = {}
    path = Path(build_dir) / "CMakeCache.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            name = line.split(":", 1)[0]
            if name in keep and "=" in line:
                out[name] = line.split("=", 1)[1]
    return out


def build(cache=DEFAULT_CACHE, log=sys.stderr):
    """Builds this machine's entry if it is not there yet (idempotent; concurrent callers wait on a lock) and
    returns it (an Entry). Takes 10-20 minutes on 2 cores the first time."""
    root = entry_dir(cache)
    entry = Entry(root)
    if entry.manifest_path.exists():
        return entry
    with _lock(root.parent / (root.name + ".lock")):
        if entry.manifest_path.exists():
            return entry
        _build(entry, Path(cache).expanduser(), log)
    return entry


def _build(entry, cache, log):
    t_start = time.time()
    root = entry.root
    if root.exists():                               # an unfinished earlier attempt: no manifest, start again
        shutil.rmtree(root)
    work = root / "work"
    work.mkdir(parents=True)
    logfile = root / "build.log"
    env = _build_env()
    py = sys.executable
    say = (lambda msg: print(f"[llama_cpp] {msg}", file=log, flush=True)) if log else (lambda msg: None)
    say(f"building {root.name} (log: {logfile})")

    # The sdist, shared by all entries of this version.
    sdist_dir = cache / "sdist"
    sdists = sorted(sdist_dir.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    if not sdists:
        say("downloading the sdist")
        _run([py, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", f"llama-cpp-python=={VERSION}",
              "-d", sdist_dir], logfile, env=env)
        sdists = sorted(sdist_dir.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    sdist = sdists[0]
    sdist_sha256 = hashlib.sha256(sdist.read_bytes()).hexdigest()
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):         # Python 3.12, and 3.9.17+/3.10.12+/3.11.4+
            tar.extractall(work, filter="data")
        else:
            tar.extractall(work)
    src = work / f"llama_cpp_python-{VERSION}"
    vendored = src / "vendor" / "llama.cpp"
    llama_commit = subprocess.run(["git", "-C", vendored, "rev-parse", "HEAD"], capture_output=True,
                                  text=True, check=False).stdout.strip() or None
    times = {}

    # (a) The wheel, from the extracted source (the same tree as the binaries), installed into site/.
    say("building the wheel (pip wheel)")
    t = time.time()
    wheel_env = dict(env, CMAKE_ARGS=" ".join(CPU_CMAKE_ARGS + WHEEL_CMAKE_ARGS))
    wheels = work / "wheels"
    wdir = work / "build-wheel"
    _run([py, "-m", "pip", "wheel", "--no-deps", "-w", wheels, "-v", "--config-settings=cmake.build-type=Release",
          f"--config-settings=build-dir={wdir}", src], logfile, env=wheel_env)
    wheel = next(wheels.glob("llama_cpp_python-*.whl"))
    times["wheel_s"] = round(time.time() - t, 1)
    _run([py, "-m", "pip", "install", "--no-deps", "--target", entry.site, wheel, DISKCACHE], logfile, env=env)
    (root / "wheel").mkdir()
    shutil.copy2(wheel, root / "wheel" / wheel.name)

    # (b) llama-server and llama-bench from the same vendored llama.cpp, same CPU options.
    say("building " + " and ".join(BIN_TARGETS) + " (cmake)")
    t = time.time()
    bdir = work / "build-bin"
    _run(["cmake", "-S", vendored, "-B", bdir, *CPU_CMAKE_ARGS, *BIN_CMAKE_ARGS], logfile, env=env)
    _run(["cmake", "--build", bdir, "--config", "Release", "-j", str(JOBS), "--target", *BIN_TARGETS],
         logfile, env=env)
    entry.bin.mkdir()
    for target in BIN_TARGETS:
        shutil.copy2(bdir / "bin" / target, entry.bin / target)
    times["binaries_s"] = round(time.time() - t, 1)
    cmake_cache = {"wheel": _cmake_cache(wdir), "binaries": _cmake_cache(bdir)}

    # (c) The converter, kept as shipped (run, never edited): the script, its conversion/ package, gguf-py/.
    entry.convert_dir.mkdir()
    shutil.copy2(vendored / "convert_hf_to_gguf.py", entry.convert_script)
    shutil.copytree(vendored / "conversion", entry.convert_dir / "conversion")
    shutil.copytree(vendored / "gguf-py", entry.gguf_py)
    for name in ("LICENSE",):
        shutil.copy2(vendored / name, entry.convert_dir / name)

    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import llama_cpp; "
             "print(llama_cpp.llama_print_system_info().decode())")
    system_info = subprocess.run([py, "-c", probe, entry.site], capture_output=True, text=True,
                                 check=False).stdout.strip()
    # pip's isolated build environment takes the newest scikit-build-core (llama-cpp-python asks for >= 0.9.2).
    found = re.search(r"scikit-build-core (\S+) using CMake (\S+)", logfile.read_text(errors="replace"))
    shutil.rmtree(work)
    manifest = {
        "llama_cpp_python": VERSION,
        "llama_cpp_commit": llama_commit,
        "sdist": sdist.name,
        "sdist_sha256": sdist_sha256,
        "wheel": wheel.name,
        "diskcache": DISKCACHE,
        "scikit_build_core": found.group(1) if found else None,
        "wheel_cmake": found.group(2) if found else None,
        "cache_key": cache_key(),
        "machine": platform.machine(),
        "cpu_flags_sha256": hashlib.sha256(cpu_flags_line().encode()).hexdigest(),
        "cpu_flags": cpu_flags_line(),
        "cmake_args": {"cpu": list(CPU_CMAKE_ARGS), "wheel": list(WHEEL_CMAKE_ARGS), "binaries": list(BIN_CMAKE_ARGS)},
        "binary_targets": list(BIN_TARGETS),
        "cmake_cache": cmake_cache,
        "llama_system_info": system_info,
        "compiler": compiler_version(),
        "python": sys.version.split()[0],
        "jobs": JOBS,
        "seconds": {**times, "total_s": round(time.time() - t_start, 1)},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # Written last: its presence is what marks the entry as complete.
    tmp = entry.manifest_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.rename(entry.manifest_path)
    say(f"built in {manifest['seconds']['total_s']:.0f} s: {root}")


def import_llama_cpp(cache=DEFAULT_CACHE):
    """llama_cpp (llama-cpp-python) from this machine's cache entry, built first if needed. (This file is named
    llama_peer.py so that it never takes the package's import name; a llama_cpp imported from elsewhere is set
    aside for the cache's.)"""
    import importlib
    entry = build(cache)
    site = str(entry.site)
    if sys.path[:1] != [site]:
        sys.path.insert(0, site)
    loaded = sys.modules.get("llama_cpp")
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(site):
        del sys.modules["llama_cpp"]
    importlib.invalidate_caches()
    llama_cpp = importlib.import_module("llama_cpp")
    if not llama_cpp.__file__.startswith(site):
        raise ImportError(f"llama_cpp was imported from {llama_cpp.__file__}, not from the cache {site}")
    return llama_cpp


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face GPT-2 -> GGUF
# ---------------------------------------------------------------------------------------------------------------

OUTTYPES = ("f32", "f16", "q8_0")

# The vendored convert_hf_to_gguf.py, run unchanged in a child process through this wrapper, which adjusts two
# converter methods for the run (nothing on disk is edited):
#
# 1. get_vocab_base_pre: the converter names a BPE tokenizer's pre-tokenizer (GGUF key tokenizer.ggml.pre) by
#    encoding a fixed test string and hashing the resulting token ids against a table of known models' hashes;
#    an unknown hash is a NotImplementedError. The ids depend on the vocabulary and merges as much as on the
#    pre-tokenizer, so a byte-level BPE freshly trained by `tokenizers` (ByteLevelBPETokenizer: GPT-2's byte-level
#    pre-tokenizer and regex, its own merges) can never be in the table. The wrapper keeps the converter's answer
#    whenever it has one, and only where it raises answers "gpt-2": the label of GPT-2's pre-tokenizer, which is the
#    one these tokenizers use. The label only steers llama.cpp's text tokenizer; the benchmarks feed token ids.
# 2. load_hparams: GPT2Model.set_gguf_parameters reads the context length from config.json's "n_ctx", a key that
#    GPT-2's original configs carry but GPT2Config no longer writes (ctransformer's save_pretrained neither): it is
#    n_positions under its old name, so the wrapper fills n_ctx from n_positions when a gpt2 config lacks it.
_CONVERT_WRAPPER = r"""
import os, runpy, sys
script = sys.argv[1]
sys.argv = [script] + sys.argv[2:]
sys.path.insert(0, os.path.dirname(script))
from conversion import base

owner = next(c for c in base.TextModel.__mro__ if "get_vocab_base_pre" in vars(c))
_get_vocab_base_pre = owner.get_vocab_base_pre

def get_vocab_base_pre(self, tokenizer):
    try:
        return _get_vocab_base_pre(self, tokenizer)
    except NotImplementedError:
        base.logger.warning("pre-tokenizer hash not in the table: labelled 'gpt-2' (byte-level BPE)")
        return "gpt-2"

owner.get_vocab_base_pre = get_vocab_base_pre

_load_hparams = base.ModelBase.load_hparams

def load_hparams(dir_model, is_mistral_format):
    hparams = _load_hparams(dir_model, is_mistral_format)
    if hparams.get("model_type") == "gpt2" and hparams.get("n_ctx") is None:
        hparams["n_ctx"] = hparams["n_positions"]
    return hparams

base.ModelBase.load_hparams = staticmethod(load_hparams)
runpy.run_path(script, run_name="__main__")
"""


def to_gguf(hf_dir, out_path, outtype, cache=DEFAULT_CACHE, quiet=True):
    """Converts a Hugging Face GPT-2 directory (config.json, model.safetensors, vocab.json and merges.txt) to a
    GGUF file of outtype f32, f16 or q8_0, with the cache entry's convert_hf_to_gguf.py (which writes q8_0
    directly: --outtype q8_0, no llama-quantize step). Returns out_path as a Path.

    As convert_hf_to_gguf does it: f16 keeps 1-D tensors (norms, biases) in f32; q8_0 quantizes the 2-D weights
    (token embedding included; the position embedding stays f32) and keeps 1-D tensors in f32. GPT-2 ties its
    output projection to the token embedding, so the GGUF has no separate output tensor."""
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {OUTTYPES}, not {outtype!r}")
    hf_dir, out_path = Path(hf_dir), Path(out_path)
    config = json.loads((hf_dir / "config.json").read_text())
    if config.get("architectures") != ["GPT2LMHeadModel"]:
        raise ValueError(f"{hf_dir}: not a GPT-2 directory (architectures={config.get('architectures')})")
    n_inner = config.get("n_inner")
    if n_inner is not None and n_inner != 4 * config["n_embd"]:
        # The converter writes feed_forward_length = 4 * n_embd for GPT-2 whatever n_inner says.
        raise ValueError(f"{hf_dir}: n_inner={n_inner} is not 4 * n_embd, which the GPT-2 converter assumes")
    entry = build(cache)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(entry.gguf_py), str(entry.convert_dir)]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-c", _CONVERT_WRAPPER, str(entry.convert_script), str(hf_dir),
           "--outfile", str(out_path), "--outtype", outtype]
    proc = subprocess.run(cmd, env=env, capture_output=quiet, text=True, check=False)
    if proc.returncode or not out_path.exists():
        detail = (proc.stdout or "")[-3000:] + (proc.stderr or "")[-3000:] if quiet else ""
        raise RuntimeError(f"convert_hf_to_gguf failed ({proc.returncode}) for {hf_dir} -> {outtype}\n{detail}")
    return out_path


# ---------------------------------------------------------------------------------------------------------------
# Running a GGUF: logits and timing
# ---------------------------------------------------------------------------------------------------------------

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}       # llama_flash_attn_type; llama.cpp's default is auto
GGML_TYPE_F32 = 0


class Session:
    """A model and a context through llama-cpp-python's low-level API (llama_cpp.llama_cpp, llama.h's functions),
    with llama.cpp's default context parameters except: n_threads and n_threads_batch = threads, n_ctx, n_batch =
    n_ubatch (so a prompt of up to n_batch tokens is one ubatch), n_seq_max, flash_attn_type, and the KV cache
    type (llama.cpp's default f16, or f32 for exact logits). Logging is off (llama-cpp-python's verbose=False)."""

    def __init__(self, gguf_path, threads=2, n_ctx=512, n_batch=512, n_seq_max=1, flash_attn="auto", kv_f32=False,
                 extra_bufts=True, cache=DEFAULT_CACHE):
        import numpy as np
        lib = import_llama_cpp(cache)
        from llama_cpp._logger import set_verbose
        set_verbose(False)
        self.np, self.lib = np, lib.llama_cpp
        lib = self.lib
        lib.llama_backend_init()
        model_params = lib.llama_model_default_params()
        model_params.use_extra_bufts = extra_bufts   # llama.cpp's default True: weights repacked (AMX, ...)
        self.model = lib.llama_model_load_from_file(str(gguf_path).encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf_path}")
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = FLASH_ATTN[flash_attn]
        if kv_f32:
            params.type_k = params.type_v = GGML_TYPE_F32
        self.ctx = lib.llama_init_from_model(self.model, params)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise RuntimeError(f"llama.cpp could not make a context for {gguf_path}")
        self.mem = lib.llama_get_memory(self.ctx)
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.n_batch = n_batch
        self.batch = lib.llama_batch_init(n_batch, 0, 1)
        self._token = np.ctypeslib.as_array(self.batch.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(n_batch,))
        self._n_seq_id = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(n_batch,))
        self._logits = np.ctypeslib.as_array(self.batch.logits, shape=(n_batch,))
        self._seq_id = [self.batch.seq_id[i] for i in range(n_batch)]

    def fill(self, tokens, pos, seq, outputs):
        """Lays out a batch: token i at position pos[i] of sequence seq[i], its logits kept where outputs[i]."""
        n = len(tokens)
        if n > self.n_batch:
            raise ValueError(f"{n} tokens in a batch of at most {self.n_batch}")
        self._token[:n] = tokens
        self._pos[:n] = pos
        self._n_seq_id[:n] = 1
        self._logits[:n] = outputs
        for i, s in enumerate(seq):
            self._seq_id[i][0] = int(s)
        self.batch.n_tokens = n

    def decode(self):
        """llama_decode of the filled batch, waited for; returns its seconds."""
        t = time.perf_counter()
        rc = self.lib.llama_decode(self.ctx, self.batch)
        self.lib.llama_synchronize(self.ctx)
        seconds = time.perf_counter() - t
        if rc:
            raise RuntimeError(f"llama_decode returned {rc}")
        return seconds

    def logits(self, i):
        """The logits of the batch's i-th output (-1: the last), a copy."""
        ptr = self.lib.llama_get_logits_ith(self.ctx, i)
        return self.np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def clear(self):
        self.lib.llama_memory_clear(self.mem, True)

    def drop_after(self, pos):
        """Forgets every sequence's positions >= pos (the KV cache keeps the prompt)."""
        self.lib.llama_memory_seq_rm(self.mem, -1, pos, -1)

    def close(self):
        if self.ctx:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def logits(gguf_path, ids, threads=2, cache=DEFAULT_CACHE):
    """llama.cpp's logits for every position of the token ids (one sequence from position 0), float32
    [len(ids), n_vocab]. For checking a conversion: f32 KV cache and no flash attention, so the only rounding is
    the model file's and the kernels'."""
    import numpy as np
    n = len(ids)
    with Session(gguf_path, threads=threads, n_ctx=_round_up(n, 256), n_batch=max(n, 32), flash_attn="off",
                 kv_f32=True, cache=cache) as s:
        s.fill(ids, range(n), [0] * n, [1] * n)
        s.decode()
        return np.stack([s.logits(i) for i in range(n)])


def check_logits(hf_dir, gguf_path, n_tokens=16, seed=0, cache=DEFAULT_CACHE):
    """Compares llama.cpp's logits of a GGUF with ctransformer's float32 logits of the Hugging Face directory it
    came from, for n_tokens random ids: max |difference| over every position and the vocabulary, and that
    divided by the spread of ctransformer's logits (their standard deviation).

    Do not expect float32 agreement: ggml's CPU GELU (GGML_GELU_FP16 in ggml-cpu/vec.h) rounds its input to
    float16 and reads the result from a float16 table, in every layer. On a 12-layer GPT-2 with random weights the
    f32 GGUF was 1.5e-3 from ctransformer (2.8e-3 of the logits' std), the same as that GELU alone moves
    transformers' GPT-2 (1.5e-3); with one layer, llama.cpp was 7.5e-5 from transformers with that GELU put in.
    A wrong conversion (a transposed weight, a lost bias, a wrong scale or epsilon) is off by O(std)."""
    import ctransformer as ct
    import numpy as np
    model = ct.nn.GPT.from_pretrained(str(hf_dir))
    vocab = json.loads((Path(hf_dir) / "config.json").read_text())["vocab_size"]
    ids = np.random.default_rng(seed).integers(0, vocab, n_tokens)
    with ct.no_grad():
        ref = model(ids[None, :])[0].numpy()[0].astype(np.float32)
    got = logits(gguf_path, ids.tolist(), cache=cache)
    diff = float(np.abs(got - ref).max())
    spread = float(ref.std())
    return {"n_tokens": n_tokens, "max_abs_diff": diff, "logits_std": spread, "relative": diff / spread,
            "argmax_agree": float((got.argmax(-1) == ref.argmax(-1)).mean())}


def _round_up(n, to):
    return -(-n // to) * to


def _measure(gguf_path, threads=2, prompt_len=128, decode_tokens=64, batch=1, rounds=3, flash_attn="auto",
             seed=0, extra_bufts=True, cache=DEFAULT_CACHE):
    """time_llama's work, in this process."""
    import numpy as np
    batches = sorted({1, *([batch] if isinstance(batch, int) else batch)})
    rng = np.random.default_rng(seed)
    per_seq = _round_up(prompt_len + decode_tokens, 256)
    n_batch = max(prompt_len, 512)
    out = {"gguf": str(gguf_path), "threads": threads, "prompt_len": prompt_len, "decode_tokens": decode_tokens,
           "rounds": rounds, "flash_attn": flash_attn, "kv_cache": "f16", "n_batch": n_batch,
           "extra_bufts": extra_bufts}
    for b in batches:
        with Session(gguf_path, threads=threads, n_ctx=b * per_seq, n_batch=n_batch, n_seq_max=b,
                     flash_attn=flash_attn, extra_bufts=extra_bufts, cache=cache) as s:
            prompts = rng.integers(0, s.n_vocab, (b, prompt_len))
            steps = rng.integers(0, s.n_vocab, (decode_tokens, b))
            if b == 1:
                # Prefill: the prompt as one batch, logits of its last token (what generation needs).
                times = []
                for _ in range(rounds):
                    s.clear()
                    s.fill(prompts[0], range(prompt_len), [0] * prompt_len, [0] * (prompt_len - 1) + [1])
                    times.append(s.decode())
                out["n_vocab"] = s.n_vocab
                out["prefill_ms"] = round(min(times) * 1e3, 3)
                out["prefill_ms_rounds"] = [round(t * 1e3, 3) for t in times]
            else:
                # b prompts, n_batch tokens at a time (untimed).
                s.clear()
                flat = [(prompts[q, p], p, q) for q in range(b) for p in range(prompt_len)]
                for i in range(0, len(flat), n_batch):
                    chunk = flat[i:i + n_batch]
                    s.fill([c[0] for c in chunk], [c[1] for c in chunk], [c[2] for c in chunk], [0] * len(chunk))
                    s.decode()
            # Decode: decode_tokens steps of one token per sequence after the prompt, logits for each; the KV
            # cache is cut back to the prompt before every round.
            rounds_ms = []
            for _ in range(rounds):
                s.drop_after(prompt_len)
                total = 0.0
                for k in range(decode_tokens):
                    s.fill(steps[k], [prompt_len + k] * b, range(b), [1] * b)
                    total += s.decode()
                rounds_ms.append(total * 1e3 / decode_tokens)
            step_ms = min(rounds_ms)
            if b == 1:
                out["decode_ms_per_token"] = round(step_ms, 3)
                out["decode_ms_rounds"] = [round(t, 3) for t in rounds_ms]
            else:
                out.setdefault("batched_decode", {})[str(b)] = {
                    "ms_per_step": round(step_ms, 3), "ms_per_token": round(step_ms / b, 3),
                    "tokens_per_s": round(b * 1e3 / step_ms, 1), "ms_per_step_rounds": [round(t, 3) for t in rounds_ms]}
    return out


def time_llama(gguf_path, threads=2, prompt_len=128, decode_tokens=64, batch=1, rounds=3, flash_attn="auto",
               isolated=True, cache=DEFAULT_CACHE):
    """llama.cpp's speed on a GGUF through llama-cpp-python, at llama.cpp's defaults for CPU (flash attention
    auto, which resolves to on for the CPU backend; f16 KV cache; n_threads = n_threads_batch = threads;
    n_batch = n_ubatch >= prompt_len, so the prompt is one ubatch). Returns a dict:

      prefill_ms           one llama_decode of a prompt of prompt_len random ids (logits of the last), best of rounds
      decode_ms_per_token  batch 1: decode_tokens llama_decode calls of one token after that prompt, mean per token,
                           best of rounds
      batched_decode       for each batch size b > 1 in `batch` (an int or a list, e.g. [1, 8, 32]): b sequences each
                           with its own prompt_len prompt, then decode_tokens steps of one token per sequence in one
                           llama_batch: ms_per_step, ms_per_token (= per step / b), tokens_per_s; best of rounds
      ..._rounds           every round's figure

    Times are of llama_decode plus llama_synchronize, without the Python around them (filling the batch) or sampling.
    isolated (default): measured in a child process, so the caller's threads and OpenMP runtimes (torch ships its
    own libgomp; llama.cpp uses the system's) do not share the process, and `llama_cpp` is not imported here.

    A child killed by a signal is run once more without llama.cpp's extra buffer types (use_extra_bufts false, the
    figures' "extra_bufts"): on an Intel Xeon with AMX (2026-12-07, llama-cpp-python 0.3.36) a q8_0 model repacked
    for AMX segfaults in its first llama_decode, as llama.cpp's issue 20824 reports; f32 and f16 run."""
    kwargs = {"threads": threads, "prompt_len": prompt_len, "decode_tokens": decode_tokens, "batch": batch,
              "rounds": rounds, "flash_attn": flash_attn, "cache": str(cache)}
    if not isolated:
        return _measure(str(gguf_path), **kwargs)
    build(cache)                                     # any build output goes to this process's stderr, not the child's
    for extra_bufts in (True, False):
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "_measure", str(gguf_path),
                               json.dumps({**kwargs, "extra_bufts": extra_bufts})], capture_output=True, text=True,
                              check=False)
        if proc.returncode >= 0:   # 0, or an error of its own: no retry
            break
        print(f"[llama_cpp] {Path(gguf_path).name}: the child died by signal {-proc.returncode} with llama.cpp's extra "
              "buffer types; again without them", file=sys.stderr, flush=True)
    if proc.returncode:
        raise RuntimeError(f"time_llama's child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------

def _bench(args):
    results = {}
    with tempfile.TemporaryDirectory(prefix="llama_cpp_bench_") as tmp:
        folder = Path(args.keep or tmp)
        for outtype in args.types:
            path = to_gguf(args.hf_dir, folder / f"model-{outtype}.gguf", outtype, cache=args.cache)
            entry = {"gguf_mib": round(path.stat().st_size / 2**20, 1)}
            if outtype == "f32" and not args.no_check:
                entry["logits_check"] = check_logits(args.hf_dir, path, cache=args.cache)
            entry.update(time_llama(path, threads=args.threads, prompt_len=args.prompt_len,
                                    decode_tokens=args.decode_tokens, batch=args.batch, rounds=args.rounds,
                                    flash_attn=args.flash_attn, cache=args.cache))
            results[outtype] = entry
            line = (f"{outtype:>5}: {entry['gguf_mib']:8.1f} MiB  prefill {args.prompt_len} tokens "
                    f"{entry['prefill_ms']:8.2f} ms  decode {entry['decode_ms_per_token']:7.3f} ms/token")
            for b, fig in entry.get("batched_decode", {}).items():
                line += f"  b{b} {fig['ms_per_step']:.2f} ms/step ({fig['tokens_per_s']:.0f} tok/s)"
            print(line, flush=True)
            if "logits_check" in entry:
                c = entry["logits_check"]
                print(f"       logits against ctransformer's float32: max |diff| {c['max_abs_diff']:.3g} = "
                      f"{c['relative']:.3g} of their std; same argmax at {c['argmax_agree']:.0%} of positions",
                      flush=True)
    print(json.dumps({"manifest": build(args.cache).manifest_path.as_posix(), "results": results}, indent=2))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build (or find) this machine's cache entry and print its path")
    p = sub.add_parser("bench", help="convert HF_DIR to GGUF (f32, f16, q8_0) and time each")
    p.add_argument("hf_dir", type=Path)
    p.add_argument("--types", nargs="+", choices=OUTTYPES, default=list(OUTTYPES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, nargs="+", default=[1])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--flash-attn", choices=sorted(FLASH_ATTN), default="auto")
    p.add_argument("--no-check", action="store_true", help="skip the f32 logits check against ctransformer")
    p.add_argument("--keep", type=Path, help="write the GGUF files here instead of a temporary folder")
    p = sub.add_parser("check", help="compare a GGUF's logits with ctransformer's for HF_DIR")
    p.add_argument("hf_dir", type=Path)
    p.add_argument("gguf", type=Path)
    p = sub.add_parser("_measure")                  # time_llama's child
    p.add_argument("gguf")
    p.add_argument("kwargs")
    args = parser.parse_args(argv)
    if args.command == "build":
        entry = build(args.cache)
        print(entry.root)
        print(json.dumps(entry.manifest, indent=2))
    elif args.command == "bench":
        _bench(args)
    elif args.command == "check":
        print(json.dumps(check_logits(args.hf_dir, args.gguf, cache=args.cache), indent=2))
    else:
        print(json.dumps(_measure(args.gguf, **json.loads(args.kwargs))))


if __name__ == "__main__":
    main()
