"""PyTorch reference modules, written from the blog posts' code, that ctransformer is checked against,
among them post_norm.py (the post-norm Transformer, jadore801120's code), pre_norm.py (the toy
translator's pre-norm model) and gpt_reference.py (the GPT)."""
