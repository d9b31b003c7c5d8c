"""Every marble diagram in a public docstring runs as a test (issue 16: a docstring that lies is a bug).

The diagrams are read from the docstrings of every public callable of ``rxpipe``,
``rxpipe.operators`` and ``rxpipe.testing``, and from the marble kit's manual. A diagram is a block
of indented ``label: diagram`` lines with a ``source:`` (or ``observable:``) line; two or more
spaces followed by anything but ``^`` (a request mark) start a comment. Each diagram has a runner
that plays it: with the marble kit where the diagram is in its language, else by driving the stage
step by step and comparing with the diagram's tokens. The runners are in one module per operator
family (``test_<family>.py``, each with its ``RUNNERS`` and one ``test_docstring_diagram``, as the
families of ``operators/_*.py``); the runners and readers more than one family uses are in
:mod:`.helpers`. A diagram without a runner (or a runner without a diagram) fails the suite
(``test_every_diagram.py``).
"""
