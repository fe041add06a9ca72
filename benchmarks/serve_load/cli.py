"""The run: the plan (the levels each server gets, full or quick), each server's levels, and main, which builds the
models, takes the offline figures, starts each server in turn and prints and saves what it measured."""
import argparse
import datetime
import json
import os
import random
import shutil
import sys
import tempfile
import time

from . import __doc__ as DESCRIPTION
from . import anchor
from .checkpoints import build_checkpoint, copy_trained_checkpoint
from .client import closed_loop, open_loop, run_client
from .cpu import CPUWatch, cpu_description
from .offline import offline_ct2, offline_ours
from .paired import paired_batch, paired_one_client, paired_saturation
from .report import http_stack, measure_config, ms, percentile, plot, print_tables, ratios, summarize
from .servers import Server, engine_counters
from .settings import LABELS, LEVEL_GAP_S, MAX_BATCH, MAX_DECODING_LENGTH, SERVERS, THREADS

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # cases.py, measure.py, results/

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
STREAM_CONCURRENCY = (1, 8, 32)
OPEN_FRACTIONS = (0.5, 1.0, 1.5, 2.0)
OPEN_MAX_REQUESTS = 20000    # an open level's bound in requests (it also stops after --seconds-per-level)
QUICK = dict(concurrency=(1, 4, 16), stream_concurrency=(1, 4), open_fractions=(1.0, 2.0), requests_per_level=24,
             seconds_per_level=5.0, sentences=64, max_queue=64, offline_calls=1, batch1_sentences=4, warmup=4,
             paired_sentences=4, paired_rounds=1, paired_batch_seconds=1.0, paired_saturation_rounds=1,
             paired_saturation_seconds=2.0,
             pause=1.0, request_timeout=30.0)
FULL = dict(concurrency=CONCURRENCY, stream_concurrency=STREAM_CONCURRENCY, open_fractions=OPEN_FRACTIONS,
            requests_per_level=300, seconds_per_level=30.0, sentences=1000, max_queue=256, offline_calls=3,
            paired_sentences=24, paired_rounds=3, paired_batch_seconds=4.0, paired_saturation_rounds=3,
            paired_saturation_seconds=5.0,
            batch1_sentences=16, warmup=16, pause=3.0, request_timeout=60.0)


def run_server_levels(kind, server, sentences, plan, count_tokens, offline_texts, log):
    """Every level of one server: warm-up, closed loop, (ours) streams, open loop. A list of level dicts."""
    levels = []
    timeout = plan["request_timeout"]

    def level(load, value, records, wall, cpu, before, watch):
        row = {"load": load, "value": value, **summarize(records, wall, cpu, count_tokens, offline_texts),
               **watch.stop(), "loadavg_1min": os.getloadavg()[0]}
        if before is not None:
            after = engine_counters(server.get("/metrics"))
            delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            if delta.get("steps"):
                row["engine_rows_per_step"] = delta["tokens"] / delta["steps"]
                row["engine_step_ms"] = 1000.0 * delta["step_seconds"] / delta["steps"]
        levels.append(row)
        log(f"  {load:7s} {value:>6g}: {row['ok']:4d} ok {row['rejected_429']:3d} x429 {row['errors']:3d} err  "
            f"{row['requests_per_s']:7.2f} req/s {row['tokens_per_s']:8.0f} tok/s  p50 {row['p50_ms'] or 0:8.1f} "
            f"p99 {row['p99_ms'] or 0:8.1f} ms"
            + (f"  ttft p50 {row['ttft_p50_ms']:.1f} ms" if row["ttft_p50_ms"] is not None else "")
            + f"  cpu: client {row['client_cpu_pct']:.0f}% server {row['server_cpu_pct']:.0f}% "
            + (f"(maths {row['server_maths_cpu_pct']:.0f}%) " if row.get("server_maths_cpu_pct") is not None else "")
            + f"others {row['others_cpu_pct']:.0f}%"
            + (f"  engine {row['engine_rows_per_step']:.1f} rows/step, {row['engine_step_ms']:.2f} ms/step"
               if "engine_rows_per_step" in row else "")
            + (f"  errors: {row['error_kinds']}" if row["errors"] else ""))
        return row

    def counters():
        return engine_counters(server.get("/metrics")) if kind == "ours" else None

    run_client(closed_loop(server.port, sentences, min(4, plan["warmup"]), plan["warmup"], 60.0, False, timeout))
    n, seconds = plan["requests_per_level"], plan["seconds_per_level"]
    starts = iter(range(0, 10**9, n))   # level k starts at sentence k * n: every server's level k sends the same ones
    for clients in plan["concurrency"]:
        time.sleep(LEVEL_GAP_S)
        before, watch = counters(), CPUWatch(server.process.pid)
        records, wall, cpu = run_client(closed_loop(server.port, sentences, clients, n, seconds, False, timeout,
                                                     next(starts)))
        level("closed", clients, records, wall, cpu, before, watch)
    if kind == "ours":
        for clients in plan["stream_concurrency"]:
            time.sleep(LEVEL_GAP_S)
            before, watch = counters(), CPUWatch(server.process.pid)
            records, wall, cpu = run_client(closed_loop(server.port, sentences, clients, n, seconds, True, timeout,
                                                         next(starts)))
            level("stream", clients, records, wall, cpu, before, watch)
    closed = [row for row in levels if row["load"] == "closed"]
    saturation = max(closed, key=lambda row: row["requests_per_s"]) if closed else None
    if saturation is None or not saturation["requests_per_s"]:
        return levels
    for k, fraction in enumerate(plan["open_fractions"]):
        time.sleep(LEVEL_GAP_S)
        rate = fraction * saturation["requests_per_s"]
        # An open level sends at its rate for the level's seconds (at most OPEN_MAX_REQUESTS requests):
        # past saturation the queue then fills and 429s are sent, and the ramp from an empty batch at the start
        # and the drain at the end weigh little in its throughput. (A level of n requests at 2x saturation lasted
        # a second or two: mostly ramp and drain, and the queue never filled.)
        n_open = min(int(rate * seconds) + 1, OPEN_MAX_REQUESTS)
        before, watch = counters(), CPUWatch(server.process.pid)
        start = (len(plan["concurrency"]) + len(plan["stream_concurrency"])) * n + k * OPEN_MAX_REQUESTS
        records, wall, cpu = run_client(open_loop(server.port, sentences, rate, n_open, seconds, timeout, seed=k,
                                                   first=start))
        row = level("open", fraction, records, wall, cpu, before, watch)
        row["rate_per_s"] = rate
    return levels


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="serve_load", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run: 1, 4, 16 clients, a few requests a level")
    p.add_argument("--sizes", default="small,base", help="comma-separated shapes of cases.POST_NORM")
    p.add_argument("--trained", action="append", default=[], metavar="[NAME=]CHECKPOINT",
                   help="a trained multi30k checkpoint (ctransformer-train multi30k --checkpoint PATH) served as well, "
                        "its outputs of mixed lengths (NAME defaults to the file's name); may be repeated")
    p.add_argument("--precisions", default="float32,int8")
    p.add_argument("--servers", default=",".join(SERVERS), help="comma-separated: " + ", ".join(SERVERS))
    p.add_argument("--requests-per-level", type=int, help="requests a level sends at most (full 300, quick 24)")
    p.add_argument("--seconds-per-level", type=float, help="seconds a level sends for at most (full 30, quick 5)")
    p.add_argument("--concurrency", help="comma-separated closed-loop clients (full 1,2,4,8,16,32,64; quick 1,4,16)")
    p.add_argument("--sentences", type=int,
                   help="test2016 sources used, in a fixed shuffled order (full 1000, quick 64)")
    p.add_argument("--max-queue", type=int,
                   help="sentences waiting before a server answers 429 (full 256, quick 64: more than any closed "
                        "loop's clients)")
    p.add_argument("--request-timeout", type=float, help="seconds a request may take (full 60, quick 30)")
    p.add_argument("--start-timeout", type=float, default=180.0, help="seconds a server may take to become ready")
    p.add_argument("--out", help="JSON file (default benchmarks/results/serve_load_<date>.json)")
    p.add_argument("--plot", help="PNG file (default: the JSON file's name with .png)")
    a = p.parse_args(argv)

    plan = dict(QUICK if a.quick else FULL)
    for key in ("requests_per_level", "seconds_per_level", "sentences", "max_queue", "request_timeout"):
        if getattr(a, key) is not None:
            plan[key] = getattr(a, key)
    if a.concurrency:
        plan["concurrency"] = tuple(int(c) for c in a.concurrency.split(","))
    servers = [s for s in a.servers.split(",") if s]
    for s in servers:
        if s not in SERVERS:
            p.error(f"--servers: {s!r} is not one of {', '.join(SERVERS)}")
    precisions = [x for x in a.precisions.split(",") if x]
    for x in precisions:
        if x not in ("float32", "int8"):
            p.error(f"--precisions: {x!r} is not float32 or int8")

    import level_cap
    stand_in = level_cap.apply()   # ct capped at a smaller CPU's level: its peers too (before any of them loads)

    import ctransformer as ct
    import measure
    from cases import POST_NORM
    from ctransformer.data.parallel_corpus import multi30k
    from ctransformer.data.subword import train_subword_vocab
    from ctransformer.translator import load_translation_checkpoint
    sizes = [s for s in a.sizes.split(",") if s]
    for s in sizes:
        if s not in POST_NORM or s in ("tiny", "multi30k"):
            p.error(f"--sizes: {s!r} is not one of small, base")
    trained = {}   # name -> the trained checkpoint's path
    for given in a.trained:
        name, _, path = given.rpartition("=")
        name = name or os.path.splitext(os.path.basename(path))[0]
        if not os.path.isfile(path):
            p.error(f"--trained: {path!r} is not a file")
        if name in sizes or name in trained:
            p.error(f"--trained: the name {name!r} is taken; give another as NAME=CHECKPOINT")
        trained[name] = path
    if not sizes and not trained:
        p.error("--sizes is empty and no --trained checkpoint is given: nothing to serve")
    ct.set_num_threads(THREADS)
    cpu = cpu_description(ct)
    date = datetime.datetime.now()
    out_path = a.out or measure.result_path(os.path.join(BENCHMARKS, "results"),
                                            "serve_load_" + date.strftime("%Y-%m-%d_%H%M"))
    plot_path = a.plot or os.path.splitext(out_path)[0] + ".png"

    def log(message):
        print(message, flush=True)

    log(f"serve_load: {cpu['model']} ({', '.join(cpu['simd_flags'])}), {cpu['cores']} cores, OpenBLAS core "
        f"{cpu['blas_core']}" + (f" (OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']})"
                                 if os.environ.get("OPENBLAS_CORETYPE") else "")
        + f"; {'quick' if a.quick else 'full'} plan: clients {','.join(map(str, plan['concurrency']))}, "
        f"<= {plan['requests_per_level']} requests / {plan['seconds_per_level']:g} s a level")

    test = multi30k("test2016").src[:plan["sentences"]]
    random.Random(0).shuffle(test)
    train = multi30k("train")
    folder = tempfile.mkdtemp(prefix="serve_load_")
    results, offline_rows, ratio_rows = [], [], []
    meta = {"date": date.strftime("%Y-%m-%d %H:%M"), "cpu": cpu, "threads": THREADS, "plan": plan,
            "servers": servers, "sizes": sizes, "trained": trained, "precisions": precisions, "sentences": len(test),
            "max_decoding_length": MAX_DECODING_LENGTH, "argv": sys.argv, "stand_in": stand_in or None,
            "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"), "loadavg_start": os.getloadavg(),
            "http": http_stack()}
    try:
        for size in sizes + list(trained):
            if size in trained:   # its own weights and vocabulary: outputs of the lengths the model gives them
                checkpoint, cfg, vocab = copy_trained_checkpoint(trained[size], folder, size)
            else:
                vocab = train_subword_vocab(train.src + train.tgt, vocab_size=POST_NORM[size]["vocab"])
                checkpoint, cfg = build_checkpoint(size, folder, vocab)
            spm_path = os.path.join(folder, f"{size}.spm.model")
            vocab.save(spm_path)
            model = load_translation_checkpoint(checkpoint)[0]
            pieces = [vocab.processor.id_to_piece(i) for i in range(len(vocab))]
            ct2_path = ct.export.to_ctranslate2(model, os.path.join(folder, f"{size}-ct2"), pieces,
                                                unk_token=pieces[vocab.unk_id], bos_token=pieces[vocab.bos_id],
                                                eos_token=pieces[vocab.eos_id])
            del model
            room = cfg["n_position"] - 1
            sources = [[pieces[i] for i in ids[:room]] + [pieces[vocab.eos_id]] for ids in vocab.encode(test)]

            def pieces_to_text(hyp):
                return vocab.decode([vocab.processor.piece_to_id(x) for x in hyp])

            def count_tokens(text, vocab=vocab):
                return min(len(vocab.encode(text)) + 1, MAX_DECODING_LENGTH) if text is not None else 0

            log(f"\n{size}: {'trained (' + trained[size] + ')' if size in trained else 'random weights'}, "
                f"d_model {cfg['d_model']}, {cfg['n_layers']} layers, {len(vocab)} subwords; "
                f"{len(test)} test2016 sentences of {min(map(len, sources)) - 1}-{max(map(len, sources)) - 1} subwords")
            for precision in precisions:
                offline = {}
                log(f"{size} {precision}: offline figures")
                offline["ours"] = offline_ours(checkpoint, precision, test, plan["offline_calls"],
                                               plan["batch1_sentences"])
                if any(s.startswith("ct2") for s in servers):
                    offline["ct2"] = offline_ct2(ct2_path, precision, sources, pieces_to_text, plan["offline_calls"],
                                                 plan["batch1_sentences"])
                for engine, figures in offline.items():
                    for batch, f in figures.items():
                        if "texts" in f:
                            f["tokens"] = sum(count_tokens(t) for t in f["texts"])
                        row = {"size": size, "precision": precision, "engine": engine, "batch": batch,
                               "seconds": f["seconds"], "sentences": f["sentences"],
                               "ms_per_sentence": 1000.0 * f["seconds"] / f["sentences"],
                               **({"tokens_per_s": f["tokens"] / f["seconds"],
                                   "tokens_per_sentence": f["tokens"] / f["sentences"]} if "tokens" in f else {}),
                               **{k: f[k] for k in ("times", "config", "settings_timed", "version", "compute_type",
                                                    "others_cpu_pct") if k in f}}
                        offline_rows.append(row)
                        log(f"  offline {engine:4s} batch {batch:2d}: {row['ms_per_sentence']:7.2f} ms a sentence"
                            + (f", {row['tokens_per_s']:7.0f} tok/s ({row['tokens_per_sentence']:.1f} tokens a "
                               f"sentence)"
                               if "tokens_per_s" in row else "")
                            + f"  others' CPU {f['others_cpu_pct']:.0f}%"
                            + (f"  [{measure_config(f['config'])}]" if "config" in f else ""))
                for kind in servers:
                    time.sleep(plan["pause"])
                    if kind == "ours":
                        argv_ = [sys.executable, "-m", "ctransformer.serve.cli", "--model", f"{size}={checkpoint}",
                                 "--precision", precision, "--host", "127.0.0.1", "--port", "0", "--threads",
                                 str(THREADS), "--max-queue", str(plan["max_queue"]), "--shutdown-timeout", "10"]
                        env = dict(os.environ)
                        texts = offline["ours"][MAX_BATCH]["texts"]
                    else:
                        config = offline["ct2"][MAX_BATCH if kind == "ct2-batching" else 1]["config"]
                        argv_ = anchor.command(kind) + [
                            "--ct2-model", ct2_path, "--spm", spm_path, "--compute-type", precision, "--intra-threads",
                            str(THREADS), "--max-queue", str(plan["max_queue"]), "--max-source", str(room)]
                        # CTranslate2 at its own defaults plus the setting chosen (as ct2_process.CT2Process runs it)
                        env = {k: v for k, v in os.environ.items()
                               if k != "OMP_WAIT_POLICY" and not k.startswith("CT2_")}
                        from ct2_process import environment
                        env.update(environment(config))   # (inter_threads: the offline figure's alone)
                        env = anchor.child_env(env)
                        texts = offline["ct2"][MAX_BATCH]["texts"]
                    log(f"{size} {precision} {LABELS[kind]}: starting")
                    server = Server(f"{size}-{precision}-{kind}", argv_, env, folder, a.start_timeout)
                    try:
                        levels = run_server_levels(kind, server, test, plan, count_tokens, texts, log)
                        if kind == "ours" and plan["paired_sentences"]:
                            time.sleep(LEVEL_GAP_S)
                            differences, records = paired_one_client(server.port, checkpoint, precision, test,
                                                                     plan["paired_sentences"], plan["request_timeout"])
                            row = {"load": "paired", "value": 1, "requests": len(records),
                                   "ok": len(differences),
                                   "difference_p50_ms": ms(percentile(differences, 50)),
                                   "difference_mean_ms": ms(sum(differences) / len(differences)) if differences
                                   else None, "differences_ms": [round(1000.0 * d, 2) for d in differences]}
                            levels.append(row)
                            log(f"  paired 1 client: {row['ok']} sentences, server - offline batch-1: p50 "
                                f"{row['difference_p50_ms'] or 0:+.1f} ms, mean {row['difference_mean_ms'] or 0:+.1f} ms")
                        if kind == "ours" and plan["paired_rounds"]:
                            pairs = paired_batch(server.port, checkpoint, precision, test, plan["paired_batch_seconds"],
                                                 plan["paired_rounds"], plan["request_timeout"], count_tokens)
                            ratios_ = sorted(b / a for a, b in pairs)
                            row = {"load": "paired", "value": MAX_BATCH, "ok": len(pairs),
                                   "rounds": [{"offline_tokens_per_s": a, "server_tokens_per_s": b} for a, b in pairs],
                                   "ratio_median": ratios_[len(ratios_) // 2]}
                            levels.append(row)
                            log(f"  paired {MAX_BATCH} clients, steady state: server / offline batch-{MAX_BATCH} tokens/s by round: "
                                + ", ".join(f"{b:.0f}/{a:.0f}" for a, b in pairs) + f"; median {row['ratio_median']:.2f}")
                        top = max(plan["open_fractions"], default=None)
                        if kind == "ours" and plan["paired_saturation_rounds"] and top and top > 1.0:
                            rounds, rejected = paired_saturation(
                                server.port, test, top, plan["paired_saturation_seconds"],
                                plan["paired_saturation_rounds"], plan["max_queue"], plan["request_timeout"],
                                count_tokens)
                            ratios_ = sorted(2.0 * r["open"] / (r["closed_before"] + r["closed_after"])
                                             for r in rounds)
                            row = {"load": "paired-open", "value": top, "ok": len(rounds), "rounds": rounds,
                                   "ratio_median": ratios_[len(ratios_) // 2], "rejected_429": len(rejected),
                                   "latency_429_p99_ms": ms(percentile(rejected, 99))}
                            levels.append(row)
                            log(f"  paired {top:g}x saturation / {MAX_BATCH} clients, steady state, tokens/s by round: "
                                + ", ".join(f"{r['open']:.0f}/({r['closed_before']:.0f}, {r['closed_after']:.0f})"
                                            for r in rounds)
                                + f"; median {row['ratio_median']:.2f}; {len(rejected)} 429s, p99 "
                                + (f"{row['latency_429_p99_ms']:.1f} ms" if rejected else "-"))
                    finally:
                        code = server.stop()
                    if kind == "ours" and code not in (0, None):
                        log(f"  {LABELS[kind]} exited with code {code}:\n{server.output()[-2000:]}")
                    for row in levels:
                        results.append({"size": size, "precision": precision, "server": kind, **row})
                for measure_, value, target, met in ratios(size, precision,
                                                           [r for r in results if r["size"] == size
                                                            and r["precision"] == precision], offline):
                    ratio_rows.append({"size": size, "precision": precision, "measure": measure_, "value": value,
                                       "target": target, "met": met})
        shutil.rmtree(folder, ignore_errors=True)   # the models, the CTranslate2 exports and the servers' logs
    except BaseException:
        log(f"\nstopped: the models and the servers' logs are kept in {folder}")
        raise
    finally:
        meta["loadavg_end"] = os.getloadavg()
        meta["ctranslate2"] = next((r.get("version") for r in offline_rows if r.get("version")), None)
        meta["build"] = ct.build_info()
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            json.dump({"meta": meta, "offline": offline_rows, "results": results, "ratios": ratio_rows}, f, indent=1)
        log(f"\nwrote {out_path}")
    png = None
    try:
        png = plot(results, plot_path)
    except Exception as error:  # noqa: BLE001 - the figures stand without the plot
        log(f"no plot: {type(error).__name__}: {error}")
    if png:
        log(f"wrote {png}")
    print_tables(meta, offline_rows, results, ratio_rows)
    return 0
