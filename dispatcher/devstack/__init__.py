"""Transitional: the local stack is the top-level `devstack` package now. Only
`dispatcher/pod/workers.py` still imports `free_ports` through here; when it imports
`dispatcher.ports` instead, this folder goes."""
