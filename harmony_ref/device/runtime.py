"""Runtime profiles: what runs on a SoC (llama.cpp on its CPU, ExecuTorch XNNPACK, Qualcomm's
QNN/Genie on the NPU, MLC on the GPU, MindSpore Lite on the NPU, this project's host runtime),
as data beside the SoC profiles (harmony_ref/device/runtimes/*.toml).

    rt = load_runtime("llama.cpp-cpu")
    profile = load_profile("dimensity-9300", runtime="llama.cpp-cpu", threads=6)   # for cost.py

A SoC profile (device/soc.py) says what the silicon has: DRAM and what each unit reads of
it, the CPU clusters, GPU and NPU peaks. A runtime profile says what a runtime makes of it:
- `unit`: where its matmuls run: "cpu" (the fastest `threads` cores of the SoC's [cpu]
  clusters), "gpu" (the SoC's [gpu] peak) or "npu" (the SoC's NPU Cube peaks);
- `weight_only_compute`: what a weight-only quantized matmul computes in ("fp16": dequantized
  to float; "weight": at its weight's dtype, int8 activations made on the fly, as llama.cpp's
  Q8 activations and XNNPACK's QD8 kernels do); device/soc.py `compute_dtype`;
- `thread_split`: how a CPU runtime splits an op over threads: "even" (each thread a fixed
  share, the op waits for its slowest core: device/threads.py) or "dynamic" (work-stealing
  chunks: the op runs at the sum of its cores' rates);
- [efficiency]: achieved / peak, on matmuls, per compute dtype, for attention and vector ops,
  on DRAM reads and on cache reads; [overhead]: per kernel launch and per forward pass, or
  (`graph = "compiled"`: a compiled NPU graph, QNN/HTP) `graph_us` per forward and no per-op
  launch;
- [float16]: what a 16-bit float matmul computes in, per format (`fp16`, `bf16`: "native" at
  the unit's fp16 rate, "widened" to fp32 at half of it, a NEON pipe holding 4 fp32 lanes for
  8 fp16 ones), optionally per core kind (`[[float16.core]]` name = a [cpu] cluster's name);
  a policy's `float16` names the format;
- `kv_cache`: "dynamic" (a decode step reads the positions filled so far) or "static" (the
  cache allocated at `kv_context` positions, 0: the configuration's context_tokens, and read
  whole every step, masked);
- [[soc_efficiency]]: a SoC's own matmul efficiency, where that SoC's calibration figures pin
  one (`soc`, `matmul`, `fitted_on`); every other SoC takes [efficiency] matmul, the value
  pooled over all the SoCs the runtime was fitted on. A runtime's achieved share of a CPU's
  nominal peak is not one number across SoCs: the clocks cores hold with every thread busy, and
  how a kernel fills each core's pipes, differ, and no spec sheet gives either;
- [calibration]: which measurements the numbers were fitted on and which scored them
  (written by `harmony-ref calibrate`, read by `harmony-ref fidelity`).

`apply_runtime(soc, runtime, threads)` merges the two into one DeviceProfile whose peaks are the
unit's and whose efficiencies and overheads are the runtime's: device/cost.py's one per-op cost
function then prices every op, for every runtime, unchanged. Any defect raises ValueError naming
the file, the field and the value (harmony_ref/_schema.py from_table), as profiles do.
"""

from __future__ import annotations

# The runtime-profile schema, loader and merge live in device/soc.py (load_profile merges a
# SoC with its runtime, so the two cannot be apart without an import cycle); this module is
# their documented home for callers.
from harmony_ref.device.soc import (  # noqa: F401
    RUNTIMES_FOLDER,
    THREAD_SPLITS,
    UNITS,
    Float16Core,
    RuntimeCalibration,
    RuntimeEfficiency,
    RuntimeFloat16,
    RuntimeOverhead,
    RuntimeProfile,
    SocEfficiency,
    apply_runtime,
    cpu_rates,
    load_runtime,
    performant_cores,
    runtime_from_dict,
    shipped_runtimes,
)
