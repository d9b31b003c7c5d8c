"""The records moved to :mod:`rxpipe.serving.records`; this module keeps the old path working (the
same objects)."""

from ..serving.records import *  # noqa: F403
from ..serving.records import __all__  # noqa: F401
