"""Regression tracking: run records (record.py), the main job (job.py), the CI gate (gate.py),
device profiles side by side (compare.py) and their plots (plots.py)."""
