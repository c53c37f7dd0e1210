"""The pod: the at-least-once engine and its window and watermark, the batch baseline, the
counterparty seam, Kafka I/O, settings, metrics and the `waitline dispatch` command."""
