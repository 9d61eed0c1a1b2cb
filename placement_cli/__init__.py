"""The ``placement`` command (``placement_cli.main``): the composition root of the command line,
above every package whose subcommands it gathers. ``python -m placement_cli`` is the same command.
"""
