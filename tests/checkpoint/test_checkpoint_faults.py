"""Checkpoints under faults: a save killed at random moments, damaged files, hostile headers.

- SIGKILL: a forked child saves the same path over and over, each save holding a model whose every
  parameter equals the save's number; the test kills it after a random delay (30 times, ~3 s). The
  file must then load and hold one whole save: every parameter equal to one and the same number,
  bitwise, and the checksum valid (the write is atomic: temp file, fsync, rename, fsync folder).
- Damaged or foreign files (truncated at every region, bit flips, empty, a header length of 2**60,
  a header claiming a huge tensor, another model's config) raise CheckpointError naming the file.
- Loading runs no code: pickle, eval and exec are replaced by traps while a checkpoint whose
  metadata holds Python-looking payloads loads; the payloads come back as plain strings.
"""
import builtins
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ctransformer as ct
from ctransformer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

CFG = dict(vocab_size=64, max_seq_len=32, n_layers=2, d_model=64, n_head=4, d_inner=128)

class Weights:
    """What save_checkpoint needs of a model: a state_dict of NumPy arrays, here all equal to k."""

    def __init__(self, state):
        self.state = {name: value.copy() for name, value in state.items()}

    def state_dict(self):
        return self.state


def gpt():
    ct.manual_seed(0)
    return ct.nn.GPT(**CFG, dropout=0.0)


def save_forever(path, weights, k, told, hold_before_rename):
    """The victim, in a forked child: saves save after save until killed, writing a byte to `told` after each.
    hold_before_rename: from its second save on, the child stops inside the save, its temp file written and not yet
    renamed, and says so (b"h"): the parent's kill then lands inside a save by construction."""
    if hold_before_rename:
        real_replace, saves = os.replace, [0]

        def replace(src, dst):
            if saves[0] >= 1:
                os.write(told, b"h")
                while True:
                    time.sleep(60)
            real_replace(src, dst)
        os.replace = replace
    while True:
        k += 1
        for value in weights.state.values():
            value[...] = k
        save_checkpoint(path, weights, step=k, config={"k": k})
        if hold_before_rename:
            saves[0] += 1
        os.write(told, b"s")


@pytest.mark.threads
def test_save_killed_at_random_moments_leaves_a_whole_checkpoint(tmp_path):
    # A forked child (no interpreter start-up per kill, so 30 kills take seconds) runs the saver;
    # it touches only NumPy, safetensors and the file system, none of which fork upsets.
    # Each kill comes once the child has finished a save (so every kill's checkpoint is its own); a third of them
    # while it holds a save open before its rename, the others a random moment later (between saves, or inside one).
    path = tmp_path / "ckpt.safetensors"
    model = gpt()
    save_checkpoint(path, model, step=0)
    weights = Weights(model.state_dict())
    rng = random.Random(1234)
    seen, inside = set(), 0
    for kill in range(30):
        start = (kill + 1) * 10_000  # exact in float32 (< 2**24)
        hold = kill % 3 == 0
        read, told = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read)
                save_forever(path, weights, start, told, hold)
            finally:
                os._exit(1)
        os.close(told)
        assert os.read(read, 1) == b"s"   # a save has finished
        if hold:
            assert os.read(read, 1) == b"h"   # and the next is held before its rename
        else:
            time.sleep(rng.uniform(0.0, 0.05))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        inside += any(name.endswith(".tmp") for name in os.listdir(tmp_path))
        fresh = gpt()
        info = load_checkpoint(path, fresh)  # raises if the file is not whole
        assert info["step"] > start, f"kill {kill}: the checkpoint of step {info['step']}, not one of this child's"
        values = {float(v) for p in fresh.parameters() for v in np.unique(p.numpy())}
        assert values == {float(info["step"])}, f"kill {kill}: a mix of saves {sorted(values)[:5]}"
        assert info["config"] == {"k": info["step"]}
        seen.add(info["step"])
    assert len(seen) == 30, seen
    assert inside >= 10, f"only {inside} of 30 kills left a temp file (10 were held inside a save)"
    # Each save clears the temp files killed savers left (their pids are gone).
    save_checkpoint(path, model, step=1)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, gpt(), step=5, config={"embed_dim": 64})
    return path


def expect_error(path, match=None, **kwargs):
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, gpt(), **kwargs)
    assert str(path) in str(info.value), info.value
    if match:
        assert match in str(info.value), info.value
    return info.value


def header_length(data):
    return int.from_bytes(data[:8], "little")


def test_truncated_anywhere_raises_naming_the_file(saved):
    data = saved.read_bytes()
    n = header_length(data)
    for cut in [0, 3, 7, 8, 9, 8 + n // 2, 8 + n - 1, 8 + n, 8 + n + 1, (8 + n + len(data)) // 2, len(data) - 1]:
        saved.write_bytes(data[:cut])
        expect_error(saved)


def test_zero_length_file(saved):
    saved.write_bytes(b"")
    expect_error(saved, "0 bytes")


@pytest.mark.parametrize("region", ["header length", "header", "data", "last byte"])
def test_bit_flips_raise_naming_the_file(saved, region):
    data = bytearray(saved.read_bytes())
    n = header_length(data)
    rng = random.Random(region)
    positions = {"header length": [0, 1, 5, 7], "header": rng.sample(range(8, 8 + n), 12),
                 "data": rng.sample(range(8 + n, len(data)), 12), "last byte": [len(data) - 1]}[region]
    for pos in positions:
        for bit in (0, 7):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            saved.write_bytes(bytes(flipped))
            try:
                load_checkpoint(saved, gpt())
            except CheckpointError as error:
                assert str(saved) in str(error), error
            else:
                # A flip inside the JSON can leave it valid and equivalent (e.g. a space's bit 0 in
                # padding, or a digit of the step); then the tensors must still be the saved ones.
                assert region == "header", f"flip at byte {pos} bit {bit} went unnoticed"


def test_oversized_header_length_is_refused_before_reading(saved):
    data = saved.read_bytes()
    saved.write_bytes((2 ** 60).to_bytes(8, "little") + data[8:])
    expect_error(saved, f"its header claims {2 ** 60} bytes")


def hand_made(path, header, payload=b""):
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + payload)


def test_a_header_claiming_a_huge_tensor_is_refused_before_allocation(tmp_path):
    # 2**40 floats claimed, 16 bytes present. Run with the address space capped at +1 GiB, so an
    # attempt to allocate what the header claims would fail loudly rather than be missed.
    path = tmp_path / "huge.safetensors"
    hand_made(path, {"__metadata__": {"format": "ctransformer-checkpoint-1"},
                     "model.w": {"dtype": "F32", "shape": [2 ** 20, 2 ** 20], "data_offsets": [0, 4 * 2 ** 40]}},
              b"\0" * 16)
    hand_made_small = tmp_path / "lying.safetensors"  # offsets within the file, shape far larger
    hand_made(hand_made_small, {"model.w": {"dtype": "F32", "shape": [2 ** 40], "data_offsets": [0, 16]}}, b"\0" * 16)
    code = textwrap.dedent(f"""
        import os, resource
        from ctransformer.checkpoint import CheckpointError, read_checkpoint
        with open("/proc/self/statm") as f:
            cap = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE") + (1 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        for p in [{str(path)!r}, {str(hand_made_small)!r}]:
            try:
                read_checkpoint(p)
            except CheckpointError as e:
                print(e)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    assert str(path) in lines[0] and "'model.w'" in lines[0], lines[0]
    assert str(hand_made_small) in lines[1] and f"[{2 ** 40}]" in lines[1], lines[1]


@pytest.mark.parametrize("header", [
    [1, 2, 3],
    {"model.w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}},
    {"model.w": {"dtype": "OBJECT", "shape": [1], "data_offsets": [0, 4]}},
    {"model.w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}},
    {"model.w": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}},
    {"model.w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}},
    {"model.w": "not a dict"},
    {"__metadata__": {"format": 1}},
])
def test_malformed_headers_raise_naming_the_file(tmp_path, header):
    path = tmp_path / "bad.safetensors"
    hand_made(path, header, b"\0" * 4)
    expect_error(path)


def test_header_that_is_not_json(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes((4).to_bytes(8, "little") + b"\xff{[}")
    expect_error(path, "not JSON")


def test_another_models_config_is_refused(saved):
    expect_error(saved, "embed_dim", config={"embed_dim": 128})


def test_another_models_shapes_are_refused(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    ct.manual_seed(0)
    save_checkpoint(path, ct.nn.GPT(**{**CFG, "d_model": 32}, dropout=0.0))
    expect_error(path, "does not fit")


def test_loading_runs_no_code(tmp_path, monkeypatch):
    payloads = ["__import__('os').system('touch pwned')", "cos\nsystem\n(S'touch pwned'\ntR.",
                pickle.dumps(print).decode("latin-1"), "{{7*7}}", "${7*7}"]
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, gpt(), step=1, config={"payload": payloads[0]}, extra={"payloads": payloads})

    def trap(*args, **kwargs):
        raise AssertionError("the loader ran code")

    for name in ("loads", "load", "Unpickler"):
        monkeypatch.setattr(pickle, name, trap)
    monkeypatch.setattr(builtins, "eval", trap)
    monkeypatch.setattr(builtins, "exec", trap)
    monkeypatch.chdir(tmp_path)
    info = load_checkpoint(path, gpt())
    assert info["extra"]["payloads"] == payloads
    assert info["config"] == {"payload": payloads[0]}
    assert not os.path.exists(tmp_path / "pwned")
