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
    eval/        accuracy on real weights, per-layer sensitivity, the budget planner
    device/      the simulated phone: SoC and runtime profiles, cost, memory, thermal, cold
                 start, physics, serving, chat prefix reuse
    lab/         a phone session (transports, lock, cooldown, telemetry, energy) and the parsers
                 of what real runtimes print; the llama.cpp peer harness
    backends/    config -> Measurement: simulated, host (this CPU), command (a real phone)
    calibrate/   fit a profile to measurements, and score it on held-out ones
    track/       run records, the gate, the run history and bisect, profile comparison, plots
    job/         the main job (`run_job`) and its host, cold-start and runtime-check parts
    sweep/       grids of configs run on Dask, resumable; the best feasible point per phone
    commands/    one module per `harmony-ref` subcommand: arguments and printing only
    cli.py       the `harmony-ref` entry point
"""

__version__ = "0.1.0"
