"""Marian tokenizer files for tests, as opus-mt's conversion lays them out: source.spm and target.spm trained
here with sentencepiece on Multi30k, and vocab.json mapping pieces to ids with ``</s>`` 0, ``<unk>`` 1 and
``<pad>`` last (separate vocabularies: target_vocab.json too, and tokenizer_config.json saying so)."""
import io
import json
import os

from ctransformer.data.parallel_corpus import multi30k


def train_spm(lines, vocab_size, model_type="unigram"):
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=vocab_size,
                                   model_type=model_type, character_coverage=1.0, minloglevel=2, num_threads=1)
    return out.getvalue()


def vocab_of(*pieces_lists):
    """vocab.json's map: </s> 0, <unk> 1, the pieces in first-seen order, <pad> last."""
    vocab = {"</s>": 0, "<unk>": 1}
    for pieces in pieces_lists:
        for p in pieces:
            if p not in vocab and p not in ("<s>", "</s>", "<unk>", "<pad>"):
                vocab[p] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def write_tokenizer(path, separate=False, n_lines=3000, vocab_size=400, language_codes=()):
    """Write source.spm, target.spm and vocab.json (and target_vocab.json) into `path`; returns the vocab
    sizes (source, target)."""
    import sentencepiece as spm

    corpus = multi30k("train")
    src_model = train_spm(corpus.src[:n_lines], vocab_size)
    tgt_model = train_spm(corpus.tgt[:n_lines], vocab_size)
    os.makedirs(path, exist_ok=True)
    for name, model in (("source.spm", src_model), ("target.spm", tgt_model)):
        with open(os.path.join(path, name), "wb") as f:
            f.write(model)

    def pieces(model):
        p = spm.SentencePieceProcessor(model_proto=model)
        return [p.id_to_piece(i) for i in range(p.get_piece_size())]

    codes = list(language_codes)
    if separate:
        source, target = vocab_of(codes, pieces(src_model)), vocab_of(pieces(tgt_model))
        json.dump(target, open(os.path.join(path, "target_vocab.json"), "w"))
        json.dump({"separate_vocabs": True, "target_vocab_file": "target_vocab.json"},
                  open(os.path.join(path, "tokenizer_config.json"), "w"))
    else:
        source = target = vocab_of(codes, pieces(src_model), pieces(tgt_model))
    json.dump(source, open(os.path.join(path, "vocab.json"), "w"))
    return len(source), len(target)


def write_marian_dir(path, d_model=32, n_layers=2, n_head=4, d_inner=64, n_position=128, vocab_size=300, seed=0,
                     generation=None):
    """A whole opus-mt-like directory: a random transformers.MarianMTModel saved by transformers (swish,
    scaled embeddings, one shared and tied vocabulary) beside the tokenizer files above, and a
    generation_config.json when `generation` is given. Returns the MarianMTModel (eval mode)."""
    import torch
    import transformers

    from reference.marian_pairs import marian_config

    n_src, _ = write_tokenizer(str(path), separate=False, vocab_size=vocab_size)
    pad = n_src - 1
    torch.manual_seed(seed)
    config = marian_config(n_src, pad, d_model=d_model, n_layers=n_layers, n_head=n_head, d_inner=d_inner,
                           n_position=n_position)
    hf = transformers.MarianMTModel(config).eval()
    hf.save_pretrained(str(path))
    if generation is not None:
        write_generation(path, pad, generation)
    return hf


def write_generation(path, pad, generation):
    """generation_config.json as opus-mt's, with `generation`'s settings (transformers' save_pretrained writes
    its own over it: write this after)."""
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bad_words_ids": [[pad]], "decoder_start_token_id": pad, "eos_token_id": 0,
                   "forced_eos_token_id": 0, "pad_token_id": pad, **generation}, f)
