"""The benchmarks (`make bench`, docs/BENCHMARKS.md): the compare scenarios against Little's law,
the bare loop and the protocol floor, the client, pod-CPU, mirror and Spark-floor benchmarks,
and the report that writes them."""
