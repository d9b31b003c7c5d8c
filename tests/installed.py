"""A program a test needs is not installed: a skip on a developer's machine, a failure under CI
(``CI`` set), where ``.ci/run`` installs everything the suite uses."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["missing"]


def missing(message: str) -> NoReturn:
    """Skip the test (fail it under CI), saying what is missing and how to install it."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
