"""Regression tracking: run records (record.py), the main job that makes them (job.py), the CI gate
(gate.py), the pytest-benchmark gate behind `tox -e perf` (perf.py), device profiles side by side
(compare.py) and their plots (plots.py)."""
