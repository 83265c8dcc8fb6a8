"""One module per `harmony-ref` subcommand: its arguments and its printing, nothing else (the work is
in the layers below). See harmony_ref/cli.py for the protocol; _output.py prints tables and JSON."""
