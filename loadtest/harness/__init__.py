"""The process harness under every load test, benchmark and fault run: `waitline` children
started and stopped, topics created, the pod's metrics parsed, Kafka read from outside the pods,
and one account of every record (`accounting`). It imports nothing from `bench` or `faults`."""
