"""Models that run: the NumPy/Numba forwards over real weights, with every Linear in its policy
format through the kernels: all-MiniLM-L6-v2 (minilm.py, linear.py) and the Llama-family decoder
(llama.py), its tokenizer and generation."""
