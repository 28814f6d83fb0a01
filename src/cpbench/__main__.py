from cpbench.cli.app import entry

if __name__ == "__main__":  # not when a worker process (the charts') imports it
    entry()
