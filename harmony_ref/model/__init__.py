"""What a model is before it has weights: its spec (shapes and forward constants, as TOML data in
model/specs/) and the op graph a runtime executes for it (ops with their shapes, fusion)."""
