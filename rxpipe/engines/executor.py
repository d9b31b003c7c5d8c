"""The executor stage moved to :mod:`rxpipe.serving`; this module keeps the old path working (the
same objects)."""

from ..serving import ExecuteFlowable, execute

__all__ = ["execute", "ExecuteFlowable"]
