"""Pick a backend by name and measure a config with it, physics-checked: what `harmony-ref run
--backend simulated|host|command` needs.

    dev = make_backend("host", auto_scale=True)                   # or "simulated", profile=...
    metrics, provenance, findings = measure(dev, config, profile) # findings: implausible metrics

Measured metrics (host, command) are checked against a roofline (harmony_ref/device/physics.py):
a command backend's against the device profile it claims to run on; the host's against a
calibrated host profile when one is given (`host_profile`), and not at all otherwise (a phone
profile's roofline says nothing about this CPU): the provenance says which.
"""

from __future__ import annotations

BACKENDS = ("simulated", "host", "command")


def make_backend(name: str, profile="harmony-flagship", command: str | None = None,
                 fmt: str | None = None, timeout_s: float = 600.0, host_profile=None,
                 auto_scale: bool = True, repeats: int = 5, values: dict | None = None):
    """The backend called `name` (one of BACKENDS); a bad name or missing argument is a ValueError.

    simulated: `profile` (shipped name, .toml path or DeviceProfile) is the device it predicts.
    host: Numba kernels on this CPU, `repeats` timed repeats per op; `auto_scale` shrinks a model
        too large for this host (the record's config says so); `host_profile` (a calibrated host
        profile, from `harmony-ref calibrate`) adds `host_model_mape_pct` and enables physics.
    command: runs `command` (a template: {model} {policy} {prompt_tokens} {new_tokens}
        {context_tokens} come from the config, other {name}s from `values`) and parses its output
        as `fmt` (mslite, tflite, llama-bench, executorch), killing it after `timeout_s`.
    """
    if name == "simulated":
        from harmony_ref.backends.simulated import SimulatedDevice

        return SimulatedDevice(profile)
    if name == "host":
        from harmony_ref.backends.host import HostDevice

        return HostDevice(repeats=repeats, auto_scale=auto_scale, model_profile=host_profile)
    if name == "command":
        from harmony_ref.backends.command import CommandDevice

        if not command or not fmt:
            raise ValueError("backend 'command' needs a command template and an output format")
        return CommandDevice(command, fmt, timeout_s, values=values)
    raise ValueError(f"unknown backend {name!r}; known: {list(BACKENDS)}")


def measure(backend, config, profile=None):
    """(metrics, provenance, implausible findings) of one config on `backend`.

    `profile` is the device a command backend runs on (its roofline checks the measurement);
    simulated and host backends ignore it (the host checks against its own `host_profile`).
    Implausible metrics come back flagged `implausible` and listed in the findings. A measurement
    that did not happen (timeout, non-zero exit, unparseable output) raises
    harmony_ref.backends.base.BackendError (a RuntimeError, not a ValueError): callers should print
    it, exit non-zero and record nothing."""
    from harmony_ref.device.profile import load_profile
    from harmony_ref.device.physics import check

    prov: dict[str, str] = {"backend": backend.name}
    if backend.name == "simulated":
        return backend.predict(config), prov, []
    if backend.name == "host":
        run = backend.measure(config)
        prov.update(run.provenance)
        ref = backend.model_profile
        config = run.config  # the scaled-down config when the host scaled the model
        metrics = run.metrics
    else:
        m = backend.measure(config)
        prov.update(m.provenance)
        ref = profile
        metrics = m.metrics
    if ref is None:
        prov["physics"] = "not checked: no profile for this backend's hardware"
        return metrics, prov, []
    ref = load_profile(ref)
    metrics, findings = check(metrics, ref, config)
    prov["physics"] = f"checked against {ref.name}: {len(findings)} implausible"
    return metrics, prov, findings
