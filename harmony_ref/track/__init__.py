"""Regression tracking: run records (record.py), the CI gate (gate.py), the run history and its
change points (history.py, changepoints.py), `bisect`, the pytest-benchmark gate behind
`tox -e perf` (perf.py), device profiles side by side (compare.py) and their plots (plots.py).
The main job that makes the records lives in job/."""
