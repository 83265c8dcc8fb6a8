"""A backend by name: what `harmony-ref run --backend simulated|host|command` needs.

    dev = make_backend("host", auto_scale=True)           # or "simulated", profile=...
    m = dev.run(config)                                   # a Measurement (backends/base.py)

Measured metrics (host, command) are checked against a roofline (device/physics.py): a command
backend's against the device profile it claims to run on; the host's against a calibrated host
profile when one is given (`host_profile`), and not at all otherwise (a phone profile's roofline
says nothing about this CPU): the Measurement's `physics` says which.
"""

from __future__ import annotations

from harmony_ref.config import BACKENDS, DEFAULT_PROFILE


def make_backend(
    name: str,
    profile=DEFAULT_PROFILE,
    command: str | None = None,
    fmt: str | None = None,
    timeout_s: float = 600.0,
    host_profile=None,
    auto_scale: bool = True,
    repeats: int = 5,
    values: dict | None = None,
    session: str | None = None,
    progress=None,
):
    """The backend called `name` (one of BACKENDS); a bad name or missing argument is a ValueError.

    simulated: `profile` (shipped name, .toml path or DeviceProfile) is the device it predicts.
    host: Numba kernels on this CPU, `repeats` timed repeats per op; `auto_scale` shrinks a model
        too large for this host (the Measurement's config says so); `host_profile` (a calibrated
        host profile, from `harmony-ref calibrate`) adds `host_model_mape_pct` and enables physics.
    command: runs `command` (a template: {model} {policy} {prompt_tokens} {new_tokens}
        {context_tokens} come from the config, other {name}s from `values`) and parses its output
        as `fmt` (mslite, tflite, llama-bench, executorch), killing it after `timeout_s`; its
        metrics are physics-checked against `profile`. With `session` (a session TOML path,
        lab/session_spec.py) it runs through that device session (lab/session.py).
    executorch: the config's ExecuTorch program (options["program"], a .pte) on this CPU through
        ExecuTorch's runtime, timed as its llama runner reports (backends/executorch.py).
    """
    if name == "simulated":
        from harmony_ref.backends.simulated import SimulatedDevice

        return SimulatedDevice(profile)
    if name == "host":
        from harmony_ref.backends.host import HostDevice

        return HostDevice(repeats=repeats, auto_scale=auto_scale, model_profile=host_profile)
    if name == "command":
        from harmony_ref.backends.command import CommandDevice

        spec = None
        if session:
            from harmony_ref.lab.session_spec import load_session

            spec = load_session(session)
        elif not command or not fmt:
            raise ValueError("backend 'command' needs a command template and an output format")
        return CommandDevice(
            command,
            fmt,
            None if spec else timeout_s,
            values=values,
            profile=profile,
            session=spec,
            progress=progress,
        )
    if name == "executorch":  # an ExecuTorch program on this CPU (backends/executorch.py)
        from harmony_ref.backends.executorch import ExecuTorchDevice

        return ExecuTorchDevice()
    raise ValueError(f"unknown backend {name!r}; known: {list(BACKENDS)}")
