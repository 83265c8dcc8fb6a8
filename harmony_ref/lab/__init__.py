"""The lab: a phone session and what real runtimes print. Transports (adb, hdc, ssh, this host),
the device session (lock, pushes, cooldown, telemetry, energy), its TOML spec, the parsers of
benchmark and accuracy outputs (llama.cpp, MindSpore Lite, ...) and of device files, and the
llama.cpp ctypes peer harness (ggml_peer.py). backends/command.py drives it."""
