"""The simulated phone: profiles (TOML data), cost model, memory, thermal, cold start."""
