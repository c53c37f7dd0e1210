"""Transitional: `free_ports` lives in `dispatcher.ports` (see this package's docstring)."""

from dispatcher.ports import free_ports

__all__ = ["free_ports"]
