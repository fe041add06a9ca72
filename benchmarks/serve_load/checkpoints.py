"""The models served: random-weight multi30k checkpoints of the benchmark shapes, or a trained one copied, each with
greedy search and a length rule that leaves max_decoding_length alone to cap an output, saved as
ctransformer-serve loads a trained checkpoint."""
import os

MAX_LEN_RATIO = 100.0        # the checkpoint's ratio rule, so high that max_decoding_length alone caps an output


def save_served_checkpoint(folder, name, model, cfg, vocab):
    """`model` as a multi30k checkpoint with `vocab` inside, folder/name.safetensors, as ctransformer-serve loads it."""
    from ctransformer.checkpoint import save_checkpoint
    from ctransformer.translator import TASK

    path = os.path.join(folder, f"{name}.safetensors")
    save_checkpoint(path, model, config=cfg, extra={"task": TASK, "sentencepiece": vocab.as_array()})
    return path


def build_checkpoint(size, folder, vocab):
    """A random-weight multi30k checkpoint of the shape `size` (cases.POST_NORM) with `vocab`: (path, model)."""
    import ctransformer as ct
    from ctransformer.translator import build_model

    from cases import POST_NORM
    c = POST_NORM[size]
    cfg = {"d_model": c["d_model"], "n_head": c["n_head"], "d_inner": c["d_inner"], "n_layers": c["n_layers"],
           "dropout": 0.1, "n_position": 200, "scale_emb_or_prj": c.get("scale_emb_or_prj", "prj"),
           "beam_size": 1, "length_penalty": 0.6, "max_len_ratio": MAX_LEN_RATIO, "train_src": ""}
    ct.manual_seed(0)
    model = build_model(cfg, len(vocab))
    model.eval()
    return save_served_checkpoint(folder, size, model, cfg, vocab), cfg


def copy_trained_checkpoint(path, folder, name):
    """A trained multi30k checkpoint (ctransformer-train multi30k --checkpoint PATH) copied into `folder` with
    greedy search and the same length rule as the random-weight ones (MAX_LEN_RATIO: max_decoding_length alone
    caps an output, as it caps CTranslate2's): (path, config, vocab). Its outputs end where the model ends them."""
    from ctransformer.translator import load_translation_checkpoint

    model, vocab, cfg = load_translation_checkpoint(path)
    if model.quantization is not None:
        raise SystemExit(f"--trained: {path} holds an {model.quantization} model; give its float32 checkpoint "
                         "(the benchmark quantises it for --precisions int8)")
    cfg = dict(cfg, beam_size=1, max_len_ratio=MAX_LEN_RATIO)
    return save_served_checkpoint(folder, name, model, cfg, vocab), cfg, vocab
