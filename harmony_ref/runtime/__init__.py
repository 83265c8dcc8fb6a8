"""Models that run: the Llama-family decoder (llama.py), its tokenizer and generation."""
