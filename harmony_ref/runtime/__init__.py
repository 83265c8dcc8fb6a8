"""Models that run: the NumPy/Numba forwards over real weights (all-MiniLM-L6-v2 today), with every
Linear in its policy format through the kernels (linear.py)."""
