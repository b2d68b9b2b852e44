"""``python -m weirmq``: the same as the ``weirmq`` command."""

from weirmq.cli.main import main

if __name__ == "__main__":
    main(prog_name="weirmq")
