"""What every server, engine and load of a run is given alike, in one place so that no two modules can disagree on
it: the machine's threads, the output cap, the batch, the pause before each level, and the servers compared."""

THREADS = 2                  # the machine's cores: the servers' threads and CTranslate2's intra_threads
MAX_DECODING_LENGTH = 50     # the README's 50 output tokens
MAX_BATCH = 32               # the batching anchor's and the offline figures' batch
LEVEL_GAP_S = 1.0            # the pause before each level: the last level's answers and spinning threads settle
SERVERS = ("ours", "ct2-per-request", "ct2-batching")
LABELS = {"ours": "ctransformer-serve", "ct2-per-request": "CTranslate2 per request",
          "ct2-batching": "CTranslate2 10 ms batching"}
