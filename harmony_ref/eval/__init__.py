"""Accuracy of quantized models on real weights: the embedding evaluation (MiniLM), LM perplexity
and KL divergence against FP32 (lm.py), per-layer sensitivity and the weight-budget planner."""
