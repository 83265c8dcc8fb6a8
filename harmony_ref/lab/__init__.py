"""The lab: a phone session and what real runtimes print. Transports (adb, hdc, this host), the
device session (lock, pushes, cooldown, telemetry, energy; session.py, its result in
session_result.py), its TOML spec, the parsers of benchmark and accuracy outputs (llama.cpp,
MindSpore Lite, ...) and of device files, `BackendError` (errors.py), and the llama.cpp ctypes
peer harness (ggml_peer.py). Above device/, below backends/ (backends/command.py drives it)."""
