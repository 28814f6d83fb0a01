from cpbench.cli.app import entry

entry()
