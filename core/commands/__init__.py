"""The ``handraise`` command's subcommands, one module per concept; ``core/cli.py`` parses and dispatches."""
