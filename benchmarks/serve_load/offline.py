"""The offline anchors, with no server running: ctransformer's Translator and CTranslate2's translate_batch on the
same sentences, at batch 32 and batch 1, the figures the servers are measured against."""
import time

from .cpu import CPUWatch
from .settings import MAX_BATCH, MAX_DECODING_LENGTH, THREADS


def our_translator(checkpoint, precision, batch_size):
    """ctransformer's greedy Translator on the checkpoint at the precision (int8 quantised after loading) and batch
    size, as the offline figures and the paired passes use it; returns (translator, model)."""
    from ctransformer.translator import Translator, load_translation_checkpoint

    model, vocab, cfg = load_translation_checkpoint(checkpoint)
    if precision == "int8":
        model.quantize("int8")
    translator = Translator(model, vocab, beam_size=1, max_len_ratio=cfg["max_len_ratio"], batch_size=batch_size,
                            warn=lambda message: None)
    return translator, model


def offline_ours(checkpoint, precision, sentences, calls, batch1_sentences):
    """ctransformer's Translator on the sentences, greedy, batch 32 (median of `calls` after a warm-up; its batches
    a thread each, ct.decode.search_batches' lanes) and batch 1 (a few sentences, one call each: a latency, not two
    sentences at once): the figures and the batch-32 translations."""
    import ctransformer as ct
    import measure

    ct.set_num_threads(THREADS)
    out = {}
    for batch, chosen in ((MAX_BATCH, sentences), (1, sentences[:batch1_sentences])):
        translator, model = our_translator(checkpoint, precision, batch)
        texts = []
        translator.translate(chosen[:batch], max_decoding_length=MAX_DECODING_LENGTH)   # warm-up
        def call():
            if batch == 1:
                texts.append([translator.translate([s], max_decoding_length=MAX_DECODING_LENGTH)[0] for s in chosen])
            else:
                texts.append(translator.translate(chosen, max_decoding_length=MAX_DECODING_LENGTH))
        watch = CPUWatch()
        times = [measure.timed(call, measure.GAP_S) for _ in range(calls)]
        out[batch] = {"seconds": sorted(times)[len(times) // 2], "times": times, "sentences": len(chosen),
                      "texts": texts[0], "others_cpu_pct": watch.stop()["others_cpu_pct"]}
        del translator, model
    return out


def offline_ct2(ct2_path, compute_type, sources, pieces_to_text, calls, batch1_sentences, tune_sentences=128):
    """CTranslate2 on the same sources, at batch 32 (all of them) and batch 1 (the first batch1_sentences): for
    each, the fastest of its documented settings (ct2_process.fastest, timed on at most tune_sentences), then a
    warm-up and `calls` timed calls in that setting (the median); the figures, the settings chosen and the
    batch-32 translations."""
    import measure
    from ct2_process import fastest

    out = {}
    for batch, chosen in ((MAX_BATCH, sources), (1, sources[:batch1_sentences])):
        options = dict(beam_size=1, max_batch_size=batch, max_decoding_length=MAX_DECODING_LENGTH)
        # batch 32: batches in parallel tried too (inter_threads), as our Translator takes its batches a thread
        # each; batch 1 is a latency, one sentence at a time, as ours.
        worker = fastest(ct2_path, compute_type, THREADS, chosen[:tune_sentences], options, calls=1,
                         batches_in_parallel=batch > 1)
        try:
            if len(chosen) > tune_sentences:   # fastest() timed a part: a warm-up on the whole
                worker.set_source(chosen)
                worker.run(**options)
            times, texts = [], None
            watch = CPUWatch(worker.proc.pid)
            for _ in range(calls):
                time.sleep(measure.GAP_S)
                answer = worker.run(hypotheses=texts is None, **options)
                times.append(answer["seconds"])
                if texts is None:
                    texts = [pieces_to_text(h) for h in answer["hypotheses"]]
            out[batch] = {"seconds": sorted(times)[len(times) // 2], "times": times, "sentences": len(chosen),
                          "texts": texts, "config": worker.config, "settings_timed": worker.timings,
                          "version": worker.info["version"], "compute_type": worker.info["compute_type"],
                          "others_cpu_pct": watch.stop()["others_cpu_pct"]}
        finally:
            worker.close()
    return out
