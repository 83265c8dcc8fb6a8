"""Backends: what turns a run config into one Measurement (metrics, provenance, physics findings).
SimulatedDevice predicts it with the device model; HostDevice runs the op graph on this CPU with the
Numba kernels and times it; CommandDevice runs a benchmark on a real phone and parses its output."""
