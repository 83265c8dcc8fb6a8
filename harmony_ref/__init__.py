"""harmony-ref: a hardware-in-the-loop benchmarking and regression harness for quantized
on-device LLM inference (HarmonyOS-class phones, MindSpore Lite models, INT4/INT8 weights).

Subpackages: quant (weight formats, policies), kernels (Numba kernels + NumPy twins),
model (specs, op graph, real-weights MiniLM), device (profiles, cost, memory, thermal, cold
start), hil (simulated / host / command backends), track (records, gate, comparison).
"""

__version__ = "0.1.0"
