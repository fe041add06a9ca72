"""The paired passes, run while ours is serving and idle: the offline Translator and the server in turn, on the same
sentences, so that the machine's drift from minute to minute (10-30% on this shared machine) cancels out of the
comparisons that the separate offline figures and levels would make."""
import asyncio
import time

from .client import Connection, Record, closed_loop, open_loop, request, run_client
from .offline import our_translator
from .settings import LEVEL_GAP_S, MAX_BATCH, MAX_DECODING_LENGTH, THREADS

PER_CALL = THREADS * MAX_BATCH   # sentences per offline call in the paired rounds: a batch of 32 a thread (lanes)


def paired_one_client(port, checkpoint, precision, sentences, n, timeout):
    """One client, paired: for each of n sentences, ctransformer's Translator at batch 1 in this process, then the
    same sentence sent to the running server (idle between requests), with a short pause before each. A 1-client
    level's p50 against offline batch-1 figures taken minutes apart, on other sentences, moved by tens of ms from
    run to run on this shared machine (one level's figure was +45 ms, the same request paired -16 ms); the paired
    difference takes the drift out. Returns (server - offline) seconds per sentence, and the records."""
    import measure

    translator, model = our_translator(checkpoint, precision, 1)
    translator.translate(sentences[:1], max_decoding_length=MAX_DECODING_LENGTH)   # warm-up

    async def run():
        conn, differences, records = await Connection.open(port), [], []
        conn = await request(conn, port, Record(0), sentences[0], False, timeout)   # warm-up
        for i, sentence in enumerate(sentences[:n]):
            await asyncio.sleep(measure.GAP_S / 3)   # the server's spinning threads, the last call's, settle
            start = time.perf_counter()
            translator.translate([sentence], max_decoding_length=MAX_DECODING_LENGTH)
            offline = time.perf_counter() - start
            await asyncio.sleep(measure.GAP_S / 3)
            record = Record(i)
            conn = await request(conn, port, record, sentence, False, timeout)
            records.append(record)
            if record.status == 200:
                differences.append(record.latency - offline)
        if conn is not None:
            conn.close()
        return differences, records

    try:
        return run_client(run())
    finally:
        del translator, model


def tokens_in_window(records, count_tokens, begin, end):
    """Output tokens of the answered requests decoded in [begin, end), each answer's tokens spread evenly over its
    request's time (send to answer): a steady rate with no step at each answer, whichever requests straddle the
    window's edges."""
    total = 0.0
    for r in records:
        if r.status != 200 or r.end is None:
            continue
        sent = r.end - r.latency
        overlap = min(r.end, end) - max(sent, begin)
        if overlap > 0:
            tokens = count_tokens(r.text) if r.tokens is None else r.tokens
            total += tokens * overlap / max(r.latency, 1e-9)
    return total


def paired_batch(port, checkpoint, precision, sentences, seconds, rounds, timeout, count_tokens):
    """32 clients, paired, in steady state: in each round, ctransformer's Translator at batch 32 on successive
    sentences for `seconds` in this process, then the same sentences sent by 32 closed-loop clients to the running
    server (idle during the offline calls) for a warm-up and `seconds` more, counting the tokens decoded after the
    warm-up (tokens_in_window). The same drift that moved the one-client figures moved the separate offline batch-32
    figure by 15% from one run to the next; in turn, each round's ratio compares like with like. Steady state,
    because a round of a few requests a client measures the ramp instead: the 32 first requests arrive at once, the
    server's Python turns them around one by one (about 30 ms for 32 on two busy cores), so they start over a spread
    of steps and end over one, and rounds of 96 sentences (three a client) lost 10-20% to that, at the start and the
    end. The warm-up is two offline batch-32 calls' time (the first wave and the spread it leaves), at least a
    second; the window at least four calls' time. Returns each round's (offline tokens/s, server tokens/s)."""
    translator, model = our_translator(checkpoint, precision, MAX_BATCH)
    translator.translate(sentences[:MAX_BATCH], max_decoding_length=MAX_DECODING_LENGTH)   # warm-up
    out = []
    first = 0
    try:
        for k in range(rounds):
            time.sleep(LEVEL_GAP_S)
            tokens, calls, start = 0, 0, time.perf_counter()
            while calls < 2 or time.perf_counter() - start < seconds:
                # a batch a thread in each call, as the offline figure's call runs them (search_batches' lanes)
                chosen = [sentences[(first + calls * PER_CALL + i) % len(sentences)] for i in range(PER_CALL)]
                texts = translator.translate(chosen, max_decoding_length=MAX_DECODING_LENGTH)
                tokens += sum(count_tokens(t) for t in texts)
                calls += 1
            elapsed = time.perf_counter() - start
            offline, per_call = tokens / elapsed, elapsed / calls
            warmup, window = max(1.0, 2.0 * per_call), max(seconds, 4.0 * per_call)
            time.sleep(LEVEL_GAP_S)
            begin = time.perf_counter() + warmup
            records, _, _ = run_client(closed_loop(port, sentences, MAX_BATCH, 10 ** 9, warmup + window, False,
                                                    timeout, first=first))
            server = tokens_in_window(records, count_tokens, begin, begin + window) / window
            out.append((offline, server))
            first += calls * PER_CALL
    finally:
        del translator, model
    return out


def paired_saturation(port, sentences, fraction, seconds, rounds, max_queue, timeout, count_tokens):
    """Saturation and `fraction` x saturation, paired in steady state: 32 closed-loop clients and Poisson arrivals
    at `fraction` x the requests/s the closed round before answered, in turn (closed, open, closed, ..., closed),
    each open round against the mean of the closed rounds either side of it, so that a drift that is linear over a
    round cancels. The levels measure saturation and 2x saturation a minute apart, and this machine drifts by 10-30%
    from minute to minute. Tokens are counted in a window after a warm-up (tokens_in_window): the closed rounds'
    warm-up is 2 s; the open rounds' is the time the queue takes to fill at the excess rate and a request then
    takes to wait through it, plus 1 s, and their sending stops a second after the window (answers outstanding
    are waited for). Returns (rounds: [{"closed_before", "open", "closed_after" tokens/s, "rate_per_s"}],
    the open rounds' 429 latencies in seconds)."""
    first = [0]

    def closed():
        warmup = 2.0
        begin = time.perf_counter() + warmup
        records, _, _ = run_client(closed_loop(port, sentences, MAX_BATCH, 10 ** 9, warmup + seconds, False, timeout,
                                                first=first[0]))
        first[0] += len(records)
        answered = sum(1 for r in records if r.status == 200 and r.end is not None and begin <= r.end < begin + seconds)
        return tokens_in_window(records, count_tokens, begin, begin + seconds) / seconds, answered / seconds

    def open_(rate, seed):
        saturation = rate / fraction
        warmup = max_queue / saturation * (1.0 / max(fraction - 1.0, 0.1) + 1.0) + 1.0
        begin = time.perf_counter() + warmup
        n = int(rate * (warmup + seconds + 1.0)) + 1
        records, _, _ = run_client(open_loop(port, sentences, rate, n, warmup + seconds + 1.0, timeout, seed=seed,
                                              first=first[0]))
        first[0] += len(records)
        rejected = [r.latency for r in records if r.status == 429 and r.latency is not None]
        return tokens_in_window(records, count_tokens, begin, begin + seconds) / seconds, rejected

    out, rejected = [], []
    time.sleep(LEVEL_GAP_S)
    before, per_s = closed()
    for k in range(rounds):
        time.sleep(LEVEL_GAP_S)
        rate = fraction * per_s
        tokens, refused = open_(rate, seed=1000 + k)
        rejected += refused
        time.sleep(LEVEL_GAP_S)
        after, per_s = closed()
        out.append({"closed_before": before, "open": tokens, "closed_after": after, "rate_per_s": rate})
        before = after
    return out, rejected
