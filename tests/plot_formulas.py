"""The numbers behind the blog's plots (the Annotated Transformer's rate and label smoothing, the two
positional-encoding tables), written out independently of ctransformer (plain Python, NumPy float64), for
the notebook and plot tests to compare against."""
import numpy as np


def annotated_rate(step, model_size, factor, warmup):
    """The Annotated Transformer's rate(), verbatim."""
    if step == 0:
        step = 1
    return factor * (model_size ** (-0.5) * min(step ** (-0.5), step * warmup ** (-1.5)))


def annotated_true_dist(targets, size=5, padding_idx=0, smoothing=0.4):
    """The Annotated Transformer's LabelSmoothing target distribution, written out by hand."""
    dist = np.full((len(targets), size), smoothing / (size - 2))
    dist[np.arange(len(targets)), targets] = 1 - smoothing
    dist[:, padding_idx] = 0
    dist[np.asarray(targets) == padding_idx] = 0
    return dist


def annotated_penalization_loss(x, smoothing=0.1):
    """The Annotated Transformer's loss(x, crit) in NumPy float64: KL(sum) of
    log_softmax([0, x/d, 1/d, 1/d, 1/d]), target 1."""
    d = x + 3
    predict = np.array([0, x / d, 1 / d, 1 / d, 1 / d])
    log_probs = predict - np.log(np.exp(predict).sum())
    true = annotated_true_dist([1], smoothing=smoothing)[0]
    keep = true > 0
    return float((true[keep] * (np.log(true[keep]) - log_probs[keep])).sum())


def sinusoid_table(n_position, d, formula):
    """The positional-encoding tables in NumPy float64, rounded to float32 as the posts' FloatTensor."""
    pos = np.arange(n_position, dtype=np.float64)[:, None]
    i = np.arange(d)[None, :]
    exponent = 2 * (i // 2) / d if formula == "paired" else i / d
    angle = pos / np.power(10000.0, exponent)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)
