"""The KV cache's storage formats, one list for the config (which validates a run's `kv_dtype`
without loading Numba) and for the kernels (kernels/attention.py's KVCache, which stores them):
fp16 rows, or int8 rows with one symmetric scale per (token, kv head), s = max|row| / 127."""

KV_DTYPES = ("fp16", "int8")
KV_INT8_MAX_LEVEL = 127
