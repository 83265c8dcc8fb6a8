"""CommandDevice: run an external benchmark command (an `hdc shell` / `adb shell` invocation of a
benchmark binary on a phone, or anything printing one of the parsed formats), parse its output.

How the command runs:
- The template is filled first: placeholders `{model}` (the checkpoint file when the config runs
  one, e.g. a .gguf for llama-bench; else the spec name), `{policy}`, `{prompt_tokens}`,
  `{new_tokens}`, `{context_tokens}`, `{batch}` come from the config, any others from `values`
  (e.g. `{threads}`); every substituted value is shell-quoted. A placeholder with no value is a
  ValueError naming it. Literal braces in a template are doubled (`{{` `}}`), as in str.format.
- Plain templates are split with `shlex.split` and run without a shell. A template that needs
  one (pipes, `&&`, `;`, redirections, `$(...)`, backquotes) runs under `/bin/sh -c`. Either way
  the command is the leader of a new process group (`start_new_session`), so on timeout the whole
  group, children included, is killed with SIGKILL. (A child that calls setsid itself escapes the
  group: that is the one case this cannot reach.)
- stdout and stderr are both parsed (benchmark_model logs to stderr, MindSpore Lite to stdout).

A timeout, a non-zero exit (reported with the tail of stderr) or unparseable output raises
`BackendError`; no metrics are returned in those cases, so nothing can be recorded. Given the
phone's `profile`, the parsed metrics are physics-checked against its roofline.

Provenance: lines `device_model=...`, `os_build=...`, `soc=...`, `kernel=...`,
`build_fingerprint=...` anywhere in the output (a template can emit them, e.g.
`hdc shell "echo device_model=$(param get const.product.model); ..."`) plus what the format
itself reports (llama-bench's cpu_info/model_type, MindSpore's model file and threads).
"""

from __future__ import annotations

import re
import shlex
import string

from harmony_ref.backends.base import Measurement, physics_checked
from harmony_ref.lab.errors import BackendError
from harmony_ref.lab.parsers import OUTPUT_FORMATS, ParseError, parse
from harmony_ref.lab.process import CommandOutput, needs_shell, run_process, tail

__all__ = [
    "CommandDevice",
    "CommandOutput",
    "command_provenance",
    "fill_template",
    "needs_shell",
    "run_command",
]

PROVENANCE_KEYS = ("device_model", "os_build", "soc", "kernel", "build_fingerprint")
_PROVENANCE_LINE = re.compile(r"^\s*(" + "|".join(PROVENANCE_KEYS) + r")=(.*?)\s*$", re.M)


def _config_values(config) -> dict[str, object]:
    """The template values a RunConfig gives (none without one)."""
    if config is None:
        return {}
    s = config.scenario
    model = config.spec.name
    if config.checkpoint:  # a checkpoint's file is what a benchmark binary loads
        from harmony_ref.runtime.loader import resolve_model_path

        model = str(resolve_model_path(config.checkpoint))
    return {
        "model": model,
        "policy": config.policy.name,
        "prompt_tokens": s.prompt_tokens,
        "new_tokens": s.new_tokens,
        "context_tokens": s.context_tokens,
        "batch": s.batch,
    }


def fill_template(template: str, values: dict[str, object]) -> str:
    names = [f for _, f, _, _ in string.Formatter().parse(template) if f]
    missing = sorted({n for n in names if n not in values})
    if missing:
        raise ValueError(
            f"command template: no value for placeholder(s) {['{' + n + '}' for n in missing]}; "
            f"have {sorted(values)}"
        )
    return template.format(**{k: shlex.quote(str(v)) for k, v in values.items()})


class CommandDevice:
    """Backend that measures by running `command_template` and parsing its output as `format`;
    with a `session` (lab/session_spec.py) the command runs through it: the session's
    transport, pushes, cooldown, warm-up, repeats and telemetry (lab/session.py), and the
    session's own command, format, timeout and profile where none is given here."""

    def __init__(
        self,
        command_template: str | None,
        format: str | None,
        timeout_s: float | None = 600.0,
        values: dict[str, object] | None = None,
        name: str = "command",
        profile=None,
        session=None,
        progress=None,
    ):
        if session is not None:
            b = session.benchmark
            command_template = command_template or b.command
            format = format or b.format
            timeout_s = timeout_s or b.timeout_s
            profile = profile if profile is not None else (session.device.profile or None)
            if not command_template:
                raise ValueError(
                    f"{session.path}: no benchmark command: set benchmark.command "
                    "or give one (--command)"
                )
            if not format:
                raise ValueError(
                    f"{session.path}: no output format: set benchmark.format or give one (--parser)"
                )
        timeout_s = 600.0 if timeout_s is None else timeout_s
        if format not in OUTPUT_FORMATS:
            raise ValueError(f"command format {format!r} unknown; known: {list(OUTPUT_FORMATS)}")
        if not command_template or not command_template.strip():
            raise ValueError("command template is empty")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.command_template = command_template
        self.format = format
        self.timeout_s = float(timeout_s)
        self.values = dict(values or {})
        self.name = name
        self.profile = profile  # the phone it runs on (name, path or DeviceProfile): physics
        self.session = session
        self.progress = progress

    def command_for(self, config=None) -> str:
        from harmony_ref.lab.session import session_values

        extra = session_values(self.session) if self.session is not None else {}
        return fill_template(
            self.command_template, {**_config_values(config), **extra, **self.values}
        )

    def run(self, config=None) -> Measurement:
        """Run the command for `config` (a RunConfig; None: the template's own values only)."""
        if self.session is not None:
            return self._run_session(config)
        cmd = self.command_for(config)
        done = run_command(cmd, self.timeout_s)
        if done.returncode != 0:
            raise BackendError(
                f"command {cmd!r} exited with code {done.returncode}; no result recorded. "
                f"Last stderr:\n{tail(done.err) or '(empty)'}"
            )
        try:
            parsed = parse(self.format, done.text)
        except ParseError as e:
            raise BackendError(f"command {cmd!r}: {e}") from e
        prov = {
            "command": cmd,
            "format": self.format,
            "shell": str(done.shell).lower(),
            "command_wall_s": f"{done.wall_s:.3f}",
        }
        prov.update(parsed.provenance)
        prov.update(command_provenance(done.text))
        config = scenario_ran(config, parsed.ran)
        metrics, findings, physics = physics_checked(
            parsed.metrics, self.profile, config, any_phone=True
        )
        return Measurement(metrics, prov, findings, physics, config)

    def _run_session(self, config) -> Measurement:
        import dataclasses

        from harmony_ref.lab.session import DeviceSession
        from harmony_ref.lab.session_spec import replaced

        cmd = self.command_for(config)
        tool: dict[str, str] = {}
        ran: dict[str, int] = {}

        def parse_one(text: str):
            try:
                parsed = parse(self.format, text)
            except ParseError as e:
                raise BackendError(f"command {cmd!r}: {e}") from e
            tool.update(parsed.provenance)
            tool.update(command_provenance(text))
            ran.update(parsed.ran)
            return parsed.metrics

        spec = self.session
        if spec.benchmark.timeout_s != self.timeout_s:
            spec = replaced(
                spec, benchmark=dataclasses.replace(spec.benchmark, timeout_s=self.timeout_s)
            )
        result = DeviceSession(spec, progress=self.progress).run(cmd, parse_one)
        prov = {
            "command": cmd,
            "format": self.format,
            "session": spec.path,
            "transport": result.transport,
            "serial": result.serial,
            **tool,
            **result.identity,
        }
        config = scenario_ran(config, ran)
        metrics, findings, physics = physics_checked(
            result.metrics(), self.profile, config, any_phone=result.transport != "local"
        )
        return Measurement(metrics, prov, findings, physics, config, session=result.to_record())


def scenario_ran(config, ran: dict[str, int]):
    """`config` with its prompt / new token counts replaced by what the tool says it ran
    (llama-bench's pp/tg sizes, ExecuTorch's and `generate`'s counts), the context grown to hold
    them: the record, the physics check and the gate then judge the scenario that ran."""
    if config is None or not ran:
        return config
    import dataclasses

    s = config.scenario
    prompt = ran.get("prompt_tokens", s.prompt_tokens) or s.prompt_tokens
    new = ran.get("new_tokens", s.new_tokens)
    context = max(s.context_tokens, prompt + new)
    if (prompt, new, context) == (s.prompt_tokens, s.new_tokens, s.context_tokens):
        return config
    return dataclasses.replace(
        config,
        scenario=dataclasses.replace(
            s, prompt_tokens=prompt, new_tokens=new, context_tokens=context
        ),
    )


def command_provenance(text: str) -> dict[str, str]:
    """The `device_model=...`-style lines a template printed (see the module doc)."""
    return dict(_PROVENANCE_LINE.findall(text))


def run_command(cmd: str, timeout_s: float) -> CommandOutput:
    """Run a filled template as described in the module doc; BackendError when it cannot start
    or times out (its process group killed). A non-zero exit is returned, not raised."""
    return run_process(command_argv(cmd), timeout_s, label=cmd, shell=needs_shell(cmd))


def command_argv(cmd: str) -> list[str]:
    """The argv a filled template runs as: split with shlex, or under /bin/sh -c when it needs a
    shell (see the module doc)."""
    try:
        argv = ["/bin/sh", "-c", cmd] if needs_shell(cmd) else shlex.split(cmd)
    except ValueError as e:  # unbalanced quotes
        raise BackendError(f"command {cmd!r} cannot be split into arguments: {e}") from e
    if not argv:
        raise BackendError("command is empty after filling the template")
    return argv
