"""Backends that turn a config into metrics: simulated (the device model), host (the Numba
kernels timed on this CPU) and command (an external benchmark on a real device, parsed)."""
