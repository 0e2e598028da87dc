"""Length traces: schema and validating loader, long-tail generator, statistics."""

from dora.trace.schema import REQUIRED_COLUMNS, Trace, load_trace, write_trace

__all__ = ["REQUIRED_COLUMNS", "Trace", "load_trace", "write_trace"]
