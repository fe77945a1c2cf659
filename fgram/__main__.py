"""The one entry point of every job besides the `fgram` command:

    python -m fgram COMMAND ...
    spark-submit [spark options] fgram/__main__.py COMMAND ...     (e.g. build TABLE INPUTS...)

Same commands, options and endings (one line, exit status) as `fgram`.
"""

from fgram.cli import main

if __name__ == "__main__":
    main()
