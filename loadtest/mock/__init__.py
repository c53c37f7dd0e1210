"""What the pod talks to in a load test: the mock counterparty, its latency models, and the
record generator that fills an input topic."""
