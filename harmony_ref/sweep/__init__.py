"""Sweeps: many run configs (models x policies x phones x scenarios) measured by the main job's
parts on a Dask cluster, resumable, each point a run record and a row of a parquet file; and
the answers drawn from them (`pick`: the best feasible model and policy per phone, a Pareto
plot).

    grid.py     the grid (flags or a sweep TOML), its points and their keys
    execute.py  what a worker runs: batches of points through job/main.py's parts, shared parts
    store.py    results/sweeps/<name>/: points.parquet, records/, pending rows, the lock
    run.py      the driver: LocalCluster or a running scheduler, batching, faults, progress
    pick.py     feasibility, the best point per phone and why the others lose; tables
    pareto.py   the Pareto plot per profile

Only run.py imports `distributed` (inside the functions that talk to a cluster), so the rest of
harmony-ref, the `pick` command included, starts without it (tests/sweep/test_imports.py).
"""
