"""Accuracy of quantized models on real weights: the embedding evaluation (MiniLM), per-layer
sensitivity and the weight-budget planner."""
