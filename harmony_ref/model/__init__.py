"""Model shapes (spec.py) and the op graph a runtime executes for them (graph.py)."""
