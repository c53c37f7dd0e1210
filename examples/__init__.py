"""Runnable handler examples for `waitline dispatch --handler examples.<module>:<attribute>`."""
