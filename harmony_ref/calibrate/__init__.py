"""Calibration: microbenchmarks on the host, a roofline + launch-overhead fit to measured op (or
phase) times, its error on held-out measurements, and the profile TOML it writes."""
