"""The main job and its parts: `run_job` (main.py) runs predicted, host, accuracy, cold start,
thermal and fidelity for one config and writes the record; host_kernels.py and host_coldstart.py
are the host's kernel timings and cold-start measurement, runtime_check.py checks a real runtime
against the reference decoder (runtime_check_judge.py runs one check and judges it,
runtime_check_run.py several in turn), gate_run.py runs the job again for the gate and
compare_run.py runs its device parts once per compared profile. Above track/ (whose records,
fidelity and comparison columns it uses), below sweep/ (which runs it per point)."""
