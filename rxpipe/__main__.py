"""``python -m rxpipe`` is the ``rxpipe`` command."""

from .cli import main

main()
