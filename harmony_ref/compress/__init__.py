"""Compression, the step between reading a checkpoint and building the decoder: structured pruning
(with repair and distillation), static W8A8 activation scales and GPTQ / AWQ, each calibrated by
running the decoder in FP32 on calibration windows (so this package sits above runtime/).

    w = compress(weights, policy, calibration_tokens)   # pipeline.py: finished DecoderWeights
    llm = Llama(w, policy, kv_dtype, max_context)        # runtime/llama.py builds, never compresses

    pipeline.py     compress(): the steps in order, build_model() (the oracle, or compress + Llama)
    observe.py      calibration windows; W8A8 activation scales and pruning norms observed on them
    sequential.py   GPTQ / AWQ block by block on the calibration windows (quant/gptq.py, awq.py)
"""

from harmony_ref.compress.pipeline import build_model, compress

__all__ = ["build_model", "compress"]
