"""Backends that turn a Config into Metrics: SimulatedDevice (the analytical model, simulated.py),
HostDevice and CommandDevice (measured). Every backend has `name` and `run(config) -> Metrics`."""
