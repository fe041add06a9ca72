"""A PyTorch implementation of the GPT (decoder-only, nanoGPT-style, as the blog post
seeds/004_09708f5e1787a8f3.txt writes it), the reference for ctransformer.nn.gpt.

Same module names, same parameter names and order, same maths as the post's code:
SelfAttention (q_layer, k_layer, v_layer, proj_layer, attn_drop, proj_drop), FFN (fc1, fc2, drop,
tanh GELU), pre-norm TransformerLayer with the optional no_res mode, GPT with the tied head,
init_weights, forward(word_idx, targets=None) with cross-entropy ignore_index=0,
configure_optimizers and generate. Two places where the post's printed code cannot run as written
are taken from its stated intent:
- ``torch.sqrt(head_dim)`` on an int: the scores are divided by ``math.sqrt(head_dim)``;
- generate's ``idx_cond = idx`` under the comment "crop it at block_size": the context is cropped
  to its last max_seq_len ids (without it the position embedding overflows).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def gelu(z):
    """0.5z(1 + tanh[(2/pi)^(1/2) * (z + 0.044715 z^3)]), as the post writes it."""
    return 0.5 * z * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * torch.pow(z, 3.0))))


class SelfAttention(nn.Module):
    def __init__(self, embed_dim, num_head, dropout):
        super().__init__()
        self.q_layer = nn.Linear(embed_dim, embed_dim)
        self.k_layer = nn.Linear(embed_dim, embed_dim)
        self.v_layer = nn.Linear(embed_dim, embed_dim)
        self.proj_layer = nn.Linear(embed_dim, embed_dim)
        self.attn_drop = nn.Dropout(dropout)
        self.proj_drop = nn.Dropout(dropout)
        self.num_head = num_head
        self.head_dim = embed_dim // num_head

    def forward(self, x):
        batch_size, seq_len, _ = x.shape
        q, k, v = self.q_layer(x), self.k_layer(x), self.v_layer(x)
        q = q.reshape(batch_size, seq_len, self.num_head, self.head_dim).transpose(1, 2)
        k = k.reshape(batch_size, seq_len, self.num_head, self.head_dim).transpose(1, 2)
        v = v.reshape(batch_size, seq_len, self.num_head, self.head_dim).transpose(1, 2)
        attn = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_mask = torch.triu(torch.ones(seq_len, seq_len, device=x.device), diagonal=1).bool()
        attn = attn.masked_fill(attn_mask, float("-inf"))
        attn = torch.softmax(attn, dim=3)
        attn = self.attn_drop(attn)
        out = torch.matmul(attn, v)
        out = out.transpose(1, 2).reshape(batch_size, seq_len, self.num_head * self.head_dim)
        return self.proj_drop(self.proj_layer(out)), attn


class FFN(nn.Module):
    def __init__(self, embed_dim, feedforward_dim, dropout):
        super().__init__()
        self.fc1 = nn.Linear(embed_dim, feedforward_dim)
        self.fc2 = nn.Linear(feedforward_dim, embed_dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.fc2(gelu(self.fc1(x))))


class TransformerLayer(nn.Module):
    def __init__(self, embed_dim, num_head, feedforward_dim, dropout, no_res):
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dim)
        self.attn = SelfAttention(embed_dim, num_head, dropout)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.ffn = FFN(embed_dim, feedforward_dim, dropout)
        self.no_res = no_res

    def forward(self, x):
        x_attn, attn = self.attn(self.norm1(x))
        if self.no_res is False:
            x_attn = x_attn + x
        x_ffn = self.ffn(self.norm2(x_attn))
        out = x_ffn if self.no_res else x_ffn + x_attn
        return out, attn


class GPT(nn.Module):
    def __init__(self, vocab_size, max_seq_len, num_layer, embed_dim, num_head, feedforward_dim, dropout,
                 no_res=False, no_pos=False):
        super().__init__()
        self.num_layer = num_layer
        self.max_seq_len = max_seq_len
        self.no_pos = no_pos
        self.word_token_embedding = nn.Embedding(vocab_size, embed_dim)
        self.word_pos_embedding = nn.Embedding(max_seq_len, embed_dim)
        self.drop = nn.Dropout(dropout)
        self.transformer = nn.ModuleList(
            [TransformerLayer(embed_dim, num_head, feedforward_dim, dropout, no_res) for _ in range(num_layer)])
        self.norm = nn.LayerNorm(embed_dim)
        self.language_model_head = nn.Linear(embed_dim, vocab_size, bias=False)
        self.word_token_embedding.weight = self.language_model_head.weight
        self.init_weights()

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
                if m.bias is not None:
                    torch.nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
        for pn, p in self.named_parameters():
            if pn.endswith("proj_layer.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.num_layer))

    def forward(self, word_idx, targets=None):
        batch_size, seq_len = word_idx.shape
        pos = torch.arange(seq_len, dtype=torch.long, device=word_idx.device)
        token_embed = self.word_token_embedding(word_idx)
        pos_embed = self.word_pos_embedding(pos)
        x = token_embed if self.no_pos else token_embed + pos_embed
        x = self.drop(x)
        attention_weights = []
        for layer in self.transformer:
            x, attn = layer(x)
            attention_weights.append(attn)
        x = self.norm(x)
        logits = self.language_model_head(x)
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=0)
            return logits, loss
        return logits, attention_weights

    def configure_optimizers(self, weight_decay):
        decay = set()
        no_decay = set()
        whitelist_weight_modules = (nn.Linear,)
        blacklist_weight_modules = (nn.LayerNorm, torch.nn.Embedding)
        for mn, m in self.named_modules():
            for pn, p in m.named_parameters():
                fpn = "%s.%s" % (mn, pn) if mn else pn
                if pn.endswith("bias"):
                    no_decay.add(fpn)
                elif pn.endswith("weight") and isinstance(m, whitelist_weight_modules):
                    decay.add(fpn)
                elif pn.endswith("weight") and isinstance(m, blacklist_weight_modules):
                    no_decay.add(fpn)
        decay.remove("language_model_head.weight")
        param_dict = {pn: p for pn, p in self.named_parameters()}
        assert len(decay & no_decay) == 0
        assert len(param_dict.keys() - (decay | no_decay)) == 0
        return [
            {"params": [param_dict[pn] for pn in sorted(list(decay))], "weight_decay": weight_decay},
            {"params": [param_dict[pn] for pn in sorted(list(no_decay))], "weight_decay": 0.0},
        ]

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.max_seq_len else idx[:, -self.max_seq_len:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx.squeeze().cpu().numpy()


@torch.no_grad()
def greedy(model, idx, max_new_tokens):
    """The arg-max loop: generate with top_k=1, without sampling. Returns (ids (b, t + n), margins),
    margins being each step's gap between the best and the second-best logit."""
    margins = []
    for _ in range(max_new_tokens):
        idx_cond = idx if idx.size(1) <= model.max_seq_len else idx[:, -model.max_seq_len:]
        logits, _ = model(idx_cond)
        top2 = torch.topk(logits[:, -1, :], 2).values
        margins.append((top2[:, 0] - top2[:, 1]).min().item())
        idx = torch.cat((idx, logits[:, -1, :].argmax(dim=-1, keepdim=True)), dim=1)
    return idx, margins
