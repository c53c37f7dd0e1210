"""The local stack: a real single-node Kafka and PostgreSQL as local processes, no Docker
(`waitline dev up|down|status`); the tests, the demo and the benchmarks run on it."""
