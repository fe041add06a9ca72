"""The toy translator: the pre-norm model of the blog post "手动实现Transformer" (a Transformer by hand),
written from the post's code.

The post hard-codes its sizes (sequence length 50, d_model 32, 4 heads of 8, FFN 64, 3 + 3 layers,
vocabulary 39, <PAD> = 2, dropout 0.1); here they are arguments with those defaults, so the same code
also builds the paper's base size. Everything else is the post's: module names (including the
encoder's "layer_l"), registration order, pre-norm with ONE LayerNorm applied to Q, K and V, biases on
every projection, -inf masking, (Q @ K^T) / sqrt(d_head), no attention dropout, the per-index PE
formula, embeddings N(0, 0.1) without padding_idx, and fc_out with a bias.

One addition for the tests: each MultiHead keeps its last attention weights in `last_attn`.
As in the post, the masks need the source and the target input to have the same length.
"""
import math

import torch

PAD = 2   # vocab_x['<PAD>'] == vocab_y['<PAD>']


def mask_pad(data, pad=PAD):
    # [b, L] -> [b, 1, 1, L] -> [b, 1, L, L]; True = masked (PAD columns)
    L = data.shape[1]
    mask = data == pad
    mask = mask.reshape(-1, 1, 1, L)
    mask = mask.expand(-1, 1, L, L)
    return mask


def mask_tril(data, pad=PAD):
    L = data.shape[1]
    tril = 1 - torch.tril(torch.ones(1, L, L, dtype=torch.long))
    mask = data == pad
    mask = mask.unsqueeze(1).long()
    mask = mask + tril
    mask = mask > 0
    mask = (mask == 1).unsqueeze(dim=1)
    return mask


def attention(Q, K, V, mask):
    # Q, K, V = [b, n_head, L, d_head]
    b, n_head, L, d_head = Q.shape
    score = torch.matmul(Q, K.permute(0, 1, 3, 2))
    score /= d_head ** 0.5                         # the post: score /= 8**0.5
    score = score.masked_fill_(mask, -float('inf'))
    score = torch.softmax(score, dim=-1)
    attn = score
    score = torch.matmul(score, V)
    score = score.permute(0, 2, 1, 3).reshape(-1, L, n_head * d_head)
    return score, attn


class MultiHead(torch.nn.Module):
    def __init__(self, d_model=32, n_head=4, dropout=0.1):
        super().__init__()
        self.n_head = n_head
        self.fc_Q = torch.nn.Linear(d_model, d_model)
        self.fc_K = torch.nn.Linear(d_model, d_model)
        self.fc_V = torch.nn.Linear(d_model, d_model)
        self.out_fc = torch.nn.Linear(d_model, d_model)
        self.norm = torch.nn.LayerNorm(normalized_shape=d_model, elementwise_affine=True)
        self.DropOut = torch.nn.Dropout(p=dropout)
        self.last_attn = None

    def forward(self, Q, K, V, mask):
        b, L, d_model = Q.shape
        h = self.n_head
        clone_Q = Q.clone()
        Q = self.norm(Q)
        K = self.norm(K)
        V = self.norm(V)
        K = self.fc_K(K)
        V = self.fc_V(V)
        Q = self.fc_Q(Q)
        Q = Q.reshape(b, L, h, d_model // h).permute(0, 2, 1, 3)
        K = K.reshape(b, K.shape[1], h, d_model // h).permute(0, 2, 1, 3)
        V = V.reshape(b, V.shape[1], h, d_model // h).permute(0, 2, 1, 3)
        score, self.last_attn = attention(Q, K, V, mask)
        score = self.DropOut(self.out_fc(score))
        score = clone_Q + score
        return score


class PositionEmbedding(torch.nn.Module):
    def __init__(self, vocab=39, d_model=32, max_len=50):
        super().__init__()

        def get_pe(pos, i, d_model):
            d = 1e4 ** (i / d_model)
            pe = pos / d
            if i % 2 == 0:
                return math.sin(pe)
            return math.cos(pe)

        pe = torch.empty(max_len, d_model)
        for i in range(max_len):
            for j in range(d_model):
                pe[i, j] = get_pe(i, j, d_model)
        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)
        self.embed = torch.nn.Embedding(vocab, d_model)
        self.embed.weight.data.normal_(0, 0.1)

    def forward(self, x):
        embed = self.embed(x)
        embed = embed + self.pe[:, :x.shape[1]]   # the post adds the whole table (its inputs are 50 long)
        return embed


class FullyConnectedOutput(torch.nn.Module):
    def __init__(self, d_model=32, d_ff=64, dropout=0.1):
        super().__init__()
        self.fc = torch.nn.Sequential(
            torch.nn.Linear(in_features=d_model, out_features=d_ff),
            torch.nn.ReLU(),
            torch.nn.Linear(in_features=d_ff, out_features=d_model),
            torch.nn.Dropout(p=dropout),)
        self.norm = torch.nn.LayerNorm(normalized_shape=d_model, elementwise_affine=True)

    def forward(self, x):
        clone_x = x.clone()
        x = self.norm(x)
        out = self.fc(x)
        out = clone_x + out
        return out


class EncoderLayer(torch.nn.Module):
    def __init__(self, d_model=32, n_head=4, d_ff=64, dropout=0.1):
        super().__init__()
        self.mh = MultiHead(d_model, n_head, dropout)
        self.fc = FullyConnectedOutput(d_model, d_ff, dropout)

    def forward(self, x, mask):
        score = self.mh(x, x, x, mask)
        out = self.fc(score)
        return out


def _layer_names(n_layers, first):
    return [first] + [f'layer_{i}' for i in range(2, n_layers + 1)]


class Encoder(torch.nn.Module):
    def __init__(self, d_model=32, n_head=4, d_ff=64, n_layers=3, dropout=0.1):
        super().__init__()
        self._names = _layer_names(n_layers, 'layer_l')   # the post: layer_l, layer_2, layer_3
        for name in self._names:
            setattr(self, name, EncoderLayer(d_model, n_head, d_ff, dropout))

    def forward(self, x, mask):
        for name in self._names:
            x = getattr(self, name)(x, mask)
        return x


class DecoderLayer(torch.nn.Module):
    def __init__(self, d_model=32, n_head=4, d_ff=64, dropout=0.1):
        super().__init__()
        self.mhl = MultiHead(d_model, n_head, dropout)
        self.mh2 = MultiHead(d_model, n_head, dropout)
        self.fc = FullyConnectedOutput(d_model, d_ff, dropout)

    def forward(self, x, y, mask_pad_x, mask_tril_y):
        y = self.mhl(y, y, y, mask_tril_y)
        y = self.mh2(y, x, x, mask_pad_x)
        y = self.fc(y)
        return y


class Decoder(torch.nn.Module):
    def __init__(self, d_model=32, n_head=4, d_ff=64, n_layers=3, dropout=0.1):
        super().__init__()
        self._names = _layer_names(n_layers, 'layer_1')
        for name in self._names:
            setattr(self, name, DecoderLayer(d_model, n_head, d_ff, dropout))

    def forward(self, x, y, mask_pad_x, mask_tril_y):
        for name in self._names:
            y = getattr(self, name)(x, y, mask_pad_x, mask_tril_y)
        return y


class Transformer(torch.nn.Module):
    def __init__(self, vocab=39, d_model=32, n_head=4, d_ff=64, n_layers=3, max_len=50, dropout=0.1):
        super().__init__()
        self.embed_x = PositionEmbedding(vocab, d_model, max_len)
        self.embed_y = PositionEmbedding(vocab, d_model, max_len)
        self.encoder = Encoder(d_model, n_head, d_ff, n_layers, dropout)
        self.decoder = Decoder(d_model, n_head, d_ff, n_layers, dropout)
        self.fc_out = torch.nn.Linear(d_model, vocab)

    def forward(self, x, y):
        mask_pad_x = mask_pad(x)
        mask_tril_y = mask_tril(y)
        x, y = self.embed_x(x), self.embed_y(y)
        x = self.encoder(x, mask_pad_x)
        y = self.decoder(x, y, mask_pad_x, mask_tril_y)
        y = self.fc_out(y)
        return y

    def attentions(self):
        """(encoder self, decoder self, decoder-encoder) attention weights of the last forward, per layer."""
        enc = [getattr(self.encoder, n).mh.last_attn for n in self.encoder._names]
        dec_slf = [getattr(self.decoder, n).mhl.last_attn for n in self.decoder._names]
        dec_enc = [getattr(self.decoder, n).mh2.last_attn for n in self.decoder._names]
        return enc, dec_slf, dec_enc


# ---- the post's data (get_data), for realistic batches -----------------------------------------
VOCAB_X = '<SOS>,<EOS>,<PAD>,0,1,2,3,4,5,6,7,8,9,q,w,e,r,t,y,u,i,o,p,a,s,d,f,g,h,j,k,l,z,x,c,v,b,n,m'
VOCAB_X = {word: i for i, word in enumerate(VOCAB_X.split(','))}
VOCAB_Y = {k.upper(): v for k, v in VOCAB_X.items()}


def get_data(rng):
    """One (x, y) pair as the post's get_data, drawn from a numpy Generator: x 50 ids, y 51 ids."""
    import numpy as np
    words = ['0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'q', 'w', 'e', 'r', 't', 'y', 'u', 'i', 'o', 'p',
             'a', 's', 'd', 'f', 'g', 'h', 'j', 'k', 'l', 'z', 'x', 'c', 'v', 'b', 'n', 'm']
    p = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                  13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26])
    p = p / p.sum()
    n = int(rng.integers(30, 49))   # random.randint(30, 48)
    x = rng.choice(words, size=n, replace=True, p=p).tolist()

    def f(i):
        i = i.upper()
        if not i.isdigit():
            return i
        return str(9 - int(i))
    y = [f(i) for i in x]
    y = y[::-1]
    y = [y[0]] + y
    x = ['<SOS>'] + x + ['<EOS>']
    y = ['<SOS>'] + y + ['<EOS>']
    x = (x + ['<PAD>'] * 50)[:50]
    y = (y + ['<PAD>'] * 51)[:51]
    return [VOCAB_X[i] for i in x], [VOCAB_Y[i] for i in y]


def get_batch(batch, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    xs, ys = zip(*(get_data(rng) for _ in range(batch)))
    return np.array(xs, dtype=np.int64), np.array(ys, dtype=np.int64)
