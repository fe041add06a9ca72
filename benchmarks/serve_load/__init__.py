"""Serving under load: ctransformer-serve against CTranslate2 behind the same HTTP stack (issue 49, item 4).

    python benchmarks/serve_load [--quick] [--sizes small,base] [--trained [NAME=]CHECKPOINT]
        [--precisions float32,int8]
        [--servers ours,ct2-per-request,ct2-batching] [--out FILE.json] [--plot FILE.png]

The models: random-weight post-norm Transformers of the benchmark shapes (cases.POST_NORM `small`, `base`), built as
the multi30k task builds its model (translator.build_model: one embedding shared by source, target and output),
with a sentencepiece BPE vocabulary of the shape's size trained on Multi30k's training text (both sides, as the
task does), saved as a multi30k checkpoint in a temporary folder, so that `ctransformer-serve` loads it as it
loads a trained one, and exported to CTranslate2 (ct.export.to_ctranslate2). The inputs: Multi30k test2016's
German sources (mixed lengths), in a fixed shuffled order that every server receives alike. The outputs are capped
at max_decoding_length=50, the README's 50 output tokens (the checkpoint's max_len_ratio is set so high that the
cap alone decides; random weights seldom choose the end, so most outputs run to it). With --trained
[NAME=]CHECKPOINT, a trained multi30k checkpoint too (``ctransformer-train multi30k --checkpoint PATH``), with its
own vocabulary, copied with greedy search and the same length rule: its outputs end where the model ends them, so
they are of mixed lengths as a served translator's are, and a batch of the 10 ms batching server waits for its
longest sentence. Every server's answers are checked against our offline Translator's (ctransformer-translate's).

The servers, one at a time, each a subprocess on a free 127.0.0.1 port, started and stopped here, with a pause
between them; never two loaded at once:
- `ours`: `python -m ctransformer.serve.cli --model NAME=CKPT --precision float32|int8 --threads 2`, the
  continuous-batching engine;
- `ct2-per-request`: a minimal Starlette app, serve_load/anchor.py (``python -m serve_load.anchor ct2-per-request``),
  exposing the same POST /v1/translate, which tokenises with the same sentencepiece model and calls
  ctranslate2.Translator.translate_batch once per request, on a one-thread executor;
- `ct2-batching`: the same app collecting sentences for up to 10 ms (from the first one's arrival) or 32
  sentences, then one translate_batch: CTranslate2's recommended pattern for independent requests.
Each is served by uvicorn in one process with its defaults (uvloop and httptools when installed, as the serve extra
installs them; the tables name the stack), and each refuses with 429 when more
than --max-queue sentences wait. CTranslate2 runs as ct2_process.py runs it at its documented best: inter_threads=1,
intra_threads=2, loaded on a short-lived thread, and in the fastest of its documented backend/ISA settings
(ct2_process.fastest), chosen by timing batch-32 calls for the batching server and batch-1 calls for the
per-request one. Its offline batch-32 figure may also take inter_threads=2 (two batches at once, a thread each),
as our Translator takes its batches a thread each; a server keeps inter_threads=1 (a wave is one batch).

The load (an asyncio client in this process, on uvloop when installed, raw HTTP/1.1 over keep-alive connections,
so that the client costs the 2 shared cores as little as possible; its own CPU time is reported, so a client-bound
figure shows):
- closed loop at 1, 2, 4, 8, 16, 32, 64 clients: each client sends its next request when its last is answered;
  a level stops sending after --requests-per-level requests or --seconds-per-level seconds, whichever first;
- ours only: a streamed pass (server-sent events, greedy) at a few concurrencies, for the time to the first
  piece and the time between pieces. The server sends a piece per finished word, not per subword, so these are
  per-word times;
- open loop: Poisson arrivals at fractions of the measured saturation (the best closed-loop requests/s of that
  server) up to 2x, each sending at its rate for --seconds-per-level (at most 20,000 requests), so that past
  saturation the queue fills and 429s are sent; answers still outstanding when sending stops are waited for at
  most --request-timeout seconds.
Every request: one text, beam_size 1, max_decoding_length 50. Recorded per request: status, end-to-end latency,
time to first piece and the gaps between pieces (streams), and its output tokens, counted by encoding the returned
translation with the same vocabulary, plus one for the end, at most 50 (the same count for every engine and for
the offline figures). Per level: requests/s and output tokens/s of the answered requests over the level's time
(first send to last answer), latency percentiles, 429s, errors, the client's own CPU time (time.process_time), the
server's CPU time and every other process's on the machine (/proc: a neighbour's compile on this shared machine shows
there, and CTranslate2's OpenMP barriers suffer most from it), and the share of answers equal to the same engine's
offline batch-32 translation (CTranslate2's per-request server may run another backend, the one fastest at batch 1,
whose int8 differs on random weights' near-ties; ours: equal off the knife edge, issue 49 item 1).

Offline anchors in the same run, on the same sentences, with no server running: ctransformer's Translator
(beam_size=1, batch_size=32; and batch_size=1 on a few sentences) and CTranslate2's translate_batch
(max_batch_size=32; and 1). And, while ours is running and idle, three paired passes that take the machine's
drift out of the comparisons: each sentence through the Translator at batch 1 in this process, then through the
server by one client, in turn (paired_one_client); rounds of a few seconds of the Translator at batch 32, then as
long of the same sentences through the server by 32 clients, counted in steady state, after a warm-up
(paired_batch); and 32 clients, then Poisson arrivals at twice the rate they were answered, in turn, both counted
in steady state (paired_saturation). Then the issue's ratios: ours at 32 clients against our offline batch-32 (the
paired rounds' median), against the per-request and the 10 ms batching CTranslate2 servers at 32 clients (with
the p99s beside), p99 / p50 on the mixed lengths, the paired pass's p50 difference from offline batch-1, and at
2x saturation the 429s' latency and the throughput against 32 clients' (the paired rounds' median).

Output: a Markdown table, a JSON file (--out, default benchmarks/results/serve_load_<date>.json) with the CPU, its
SIMD flags and OpenBLAS's core, and a plot of throughput against p99 latency, one line per server (--plot, default
beside the JSON, .png; altair + vl-convert, as ctransformer.plots). A smoke run: --quick --sizes small.

Runs of their own: `python benchmarks/serve_load gpt --help` (a GPT: OpenAI's chat against its completions on one
server, paired), `python benchmarks/serve_load llama --help` (a GPT's /v1/completions against llama.cpp's
llama-server) and `python benchmarks/serve_load versions --help` (installed versions of ctransformer in turn under
one load).
"""

# A module a concept, each readable alone (this file holds only the description: --help prints it):
#   settings     what every server, engine and load is given alike (threads, output cap, batch, servers compared)
#   apis         what each endpoint is sent and answers (/v1/translate, OpenAI's completions and chat)
#   client       the asyncio HTTP/1.1 load client and its closed and open loops
#   servers      a server under test as a subprocess; ours' engine counters
#   anchor       the CTranslate2 anchor servers (a child process: python -m serve_load.anchor MODE ...)
#   checkpoints  the models served, saved as ctransformer-serve loads them
#   offline      the offline anchors: our Translator and CTranslate2, no server running
#   paired       the paired passes, offline and server in turn, that take the machine's drift out
#   cpu          the CPU: what it is, and where its time goes during a level
#   report       the figures: statistics, the ratios, the plot and the tables
#   cli          the plan, each server's levels, and the run
#   gpt          `serve_load gpt`: a GPT's chat against its completions, paired
#   llama        `serve_load llama`: our served GPT against llama.cpp's llama-server, paired by round
#   versions     `serve_load versions`: installed versions in turn under one load
