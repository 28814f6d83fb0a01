"""The command line (typer and rich live only here): one module per command, wired in cli.app."""
