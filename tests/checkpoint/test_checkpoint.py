"""Checkpoints: safetensors with no code on load, atomic writes, clear errors for bad files."""
import json

import numpy as np
import pytest

import ctransformer as ct
from ctransformer import checkpoint
from ctransformer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def _model_and_optimizer():
    ct.manual_seed(0)
    model = ct.nn.Transformer(7, 7, 0, 0, d_word_vec=16, d_model=16, d_inner=32, n_layers=1, n_head=2, d_k=8, d_v=8)
    optimizer = ct.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = ct.optim.LambdaLR(optimizer, ct.optim.NoamLambda(16, 1.0, 10))
    src = np.array([[1, 2, 3, 0]], dtype=np.int64)
    loss = model(src, src).sum()
    loss.backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def test_round_trip_restores_model_optimizer_and_schedule(tmp_path):
    model, optimizer, scheduler = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, model, optimizer, scheduler, step=7, config={"d_model": 16}, extra={"note": [1, 2]})
    ct.manual_seed(1)
    fresh = ct.nn.Transformer(7, 7, 0, 0, d_word_vec=16, d_model=16, d_inner=32, n_layers=1, n_head=2, d_k=8, d_v=8)
    fresh_opt = ct.optim.Adam(fresh.parameters(), lr=1e-3)
    fresh_sched = ct.optim.LambdaLR(fresh_opt, ct.optim.NoamLambda(16, 1.0, 10))
    info = load_checkpoint(path, fresh, fresh_opt, fresh_sched, config={"d_model": 16})
    assert info == {"step": 7, "config": {"d_model": 16}, "extra": {"note": [1, 2]}}
    for (k, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=k)
    assert fresh_opt.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    saved, loaded = optimizer.state_dict()["state"], fresh_opt.state_dict()["state"]
    for index in saved:
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(np.asarray(saved[index][key]), np.asarray(loaded[index][key]))


def test_file_is_plain_safetensors_readable_without_ctransformer(tmp_path):
    model, _, _ = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, model, step=3)
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    assert "model.trg_word_prj.weight" in tensors
    np.testing.assert_array_equal(tensors["model.trg_word_prj.weight"], model.trg_word_prj.weight.numpy())


def test_truncated_file_raises_clear_error(tmp_path):
    model, _, _ = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, model)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_checkpoint(path, model)


def test_flipped_byte_is_caught_by_the_checksum(tmp_path):
    model, _, _ = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, model)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(path, model)


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "junk.safetensors"
    path.write_bytes(b"this is not a safetensors file at all")
    model, _, _ = _model_and_optimizer()
    with pytest.raises(CheckpointError):
        load_checkpoint(path, model)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.safetensors", model)


def test_checkpoint_of_another_model_is_refused(tmp_path):
    model, _, _ = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, model, config={"d_model": 16})
    with pytest.raises(CheckpointError, match="d_model"):
        load_checkpoint(path, model, config={"d_model": 32})
    other = ct.nn.Transformer(9, 9, 0, 0, d_word_vec=16, d_model=16, d_inner=32, n_layers=1, n_head=2, d_k=8, d_v=8)
    with pytest.raises(CheckpointError, match="size mismatch"):
        load_checkpoint(path, other)


def test_crash_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model, _, _ = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, model, step=1)
    before = path.read_bytes()

    import safetensors.numpy

    def crash(tensors, metadata=None):  # the checkpoint's temp file is open (and empty) by now
        raise KeyboardInterrupt("simulated crash mid-save")

    monkeypatch.setattr(safetensors.numpy, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model, step=2)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]   # no temporary file left behind
    monkeypatch.undo()
    assert load_checkpoint(path, model)["step"] == 1


def test_loading_executes_no_code(tmp_path):
    """The metadata is JSON parsed as data: a string that looks like code stays a string."""
    model, _, _ = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    payload = "__import__('os').system('touch " + str(tmp_path / "pwned") + "')"
    save_checkpoint(path, model, extra={"payload": payload})
    info = load_checkpoint(path, model)
    assert info["extra"]["payload"] == payload
    assert not (tmp_path / "pwned").exists()


def test_contents_read_without_a_model(tmp_path):
    """read_checkpoint_contents: the weights under their module names, step, config and extra (its arrays
    put back), for readers that build the model from the stored config (ctransformer.translator)."""
    model, optimizer, scheduler = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    table = np.arange(6, dtype=np.uint8)
    save_checkpoint(path, model, optimizer, scheduler, step=7, config={"d_model": 16},
                    extra={"note": [1, 2], "table": table})
    contents = checkpoint.read_checkpoint_contents(path)
    assert contents["step"] == 7 and contents["config"] == {"d_model": 16}
    assert contents["extra"]["note"] == [1, 2]
    np.testing.assert_array_equal(contents["extra"]["table"], table)
    assert sorted(contents["model"]) == sorted(model.state_dict())
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(contents["model"][name], value, err_msg=name)


def test_contents_of_a_tampered_extra_entry_is_a_checkpoint_error(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    model, _, _ = _model_and_optimizer()
    path = tmp_path / "ckpt.safetensors"
    save_checkpoint(path, model, extra={"note": 1})
    with safe_open(str(path), framework="numpy") as f:
        metadata = f.metadata()
    save_file(load_file(str(path)), str(path), metadata={**metadata, "extra": "{not json"})
    with pytest.raises(CheckpointError, match="corrupted 'extra' entry"):
        checkpoint.read_checkpoint_contents(path)
