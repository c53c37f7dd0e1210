"""Operator tools for the dead-letter topic: list, show, stats and replay (`waitline dlq`)."""
