"""`python -m dispatcher` runs the `waitline` command."""

from dispatcher.cli import main

main()
