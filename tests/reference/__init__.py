"""PyTorch reference modules, written from the seeds' code, that ctransformer is checked against."""
