"""Toy translation data: the task of the small pre-norm model.

x: 30..48 words drawn with replacement (digits weighted 1..10, letters 1..26, normalised);
y: x with letters upper-cased and digits d -> 9 - d, reversed, its first word doubled.
Both get <SOS>/<EOS>; x is padded or cut to 50 ids, y to 51. The target vocabulary is the source
one upper-cased, with the same ids.
"""
import numpy as np

_TOKENS = "<SOS>,<EOS>,<PAD>,0,1,2,3,4,5,6,7,8,9,q,w,e,r,t,y,u,i,o,p,a,s,d,f,g,h,j,k,l,z,x,c,v,b,n,m".split(",")
VOCAB_X = {word: i for i, word in enumerate(_TOKENS)}
VOCAB_Y = {word.upper(): i for word, i in VOCAB_X.items()}
SOS, EOS, PAD = VOCAB_X["<SOS>"], VOCAB_X["<EOS>"], VOCAB_X["<PAD>"]
SRC_LEN, TGT_LEN = 50, 51

_WORDS = _TOKENS[3:]
_WEIGHTS = np.array(list(range(1, 11)) + list(range(1, 27)), dtype=np.float64)
_WEIGHTS /= _WEIGHTS.sum()


def _translate(word):
    return str(9 - int(word)) if word.isdigit() else word.upper()


def toy_translation_sample(rng: np.random.Generator):
    """One (x, y) pair of id arrays, lengths 50 and 51, as the toy translator's get_data."""
    n = int(rng.integers(30, 49))  # random.randint(30, 48) includes 48
    x = list(rng.choice(_WORDS, size=n, replace=True, p=_WEIGHTS))
    y = [_translate(w) for w in x][::-1]
    y = [y[0]] + y
    x = ["<SOS>"] + x + ["<EOS>"]
    y = ["<SOS>"] + y + ["<EOS>"]
    x = (x + ["<PAD>"] * SRC_LEN)[:SRC_LEN]
    y = (y + ["<PAD>"] * TGT_LEN)[:TGT_LEN]
    return (np.array([VOCAB_X[w] for w in x], dtype=np.int64), np.array([VOCAB_Y[w] for w in y], dtype=np.int64))


def toy_translation_batch(rng: np.random.Generator, batch_size=8):
    """(x, y): (batch_size, 50) and (batch_size, 51) int64 arrays."""
    pairs = [toy_translation_sample(rng) for _ in range(batch_size)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def decode_tokens(ids, target=True, strip=True):
    """Ids back to words (target vocabulary by default); strip drops <SOS> and stops at <EOS>."""
    vocab = list(VOCAB_Y) if target else list(VOCAB_X)
    words = []
    for i in ids:
        i = int(i)
        if strip and i == SOS:
            continue
        if strip and i in (EOS, PAD):
            break
        words.append(vocab[i])
    return words
