"""`python -m dispatcher` runs the `waitline` command."""

from dispatcher.cli import main

if __name__ == "__main__":  # not when a spawned child process imports it (multiprocessing)
    main()
