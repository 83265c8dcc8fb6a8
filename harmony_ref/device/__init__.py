"""The simulated phone, analytical and exact: device profiles (TOML data), the roofline + launch
cost model, memory, thermal throttling, cold start, physics bounds on measurements, and the
serving simulation. Everything here is a function of a profile and a run config."""
