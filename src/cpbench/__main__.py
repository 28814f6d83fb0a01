from cpbench.cli import main

main()
