"""One module per `harmony-ref` subcommand (see harmony_ref/cli.py for the protocol)."""
