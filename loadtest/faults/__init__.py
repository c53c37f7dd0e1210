"""The fault suite (`make chaos`, docs/RELIABILITY.md) and the crash demo (`make demo`): faults
injected into real pods, every record accounted for from outside them."""
