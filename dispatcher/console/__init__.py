"""`waitline console`: the DLQ, the wait registry and the pods in a browser, with safe redrive."""
