from cpbench.cli import entry

entry()
