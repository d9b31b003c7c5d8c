"""Package layout that pyproject.toml alone cannot express (DESIGN §1).

Every ``rxpipe*`` package is found under ``rxpipe/``; the operators live in the top-level
``operators/`` folder and are installed as ``rxpipe.operators``. ``operators``, ``rxpipe`` and
``pipelines`` are names of unrelated PyPI projects: install from the checkout, never the index.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["rxpipe", "rxpipe.*"]), "rxpipe.operators"],
    package_dir={"rxpipe.operators": "operators"},
)
