"""Accuracy metrics of a running model: LM perplexity and KL divergence against FP32."""
