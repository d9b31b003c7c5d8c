"""Package layout that pyproject.toml alone cannot express (DESIGN §1).

Every ``rxpipe*`` package is found under ``rxpipe/``; the operators live in the top-level
``operators/`` folder and are installed as ``rxpipe.operators``, the pipeline files of
``pipelines/`` as ``rxpipe.pipelines`` (so ``rxpipe run llm_gateway`` finds them anywhere). ``operators``, ``rxpipe`` and
``pipelines`` are names of unrelated PyPI projects: install from the checkout, never the index.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["rxpipe", "rxpipe.*"]), "rxpipe.operators", "rxpipe.pipelines"],
    package_dir={"rxpipe.operators": "operators", "rxpipe.pipelines": "pipelines"},
)
