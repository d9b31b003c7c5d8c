"""The engine interface moved to :mod:`rxpipe.serving.engine`; this module keeps the old path working (the
same objects)."""

from ..serving.engine import *  # noqa: F403
from ..serving.engine import __all__  # noqa: F401
