"""The pod: the at-least-once engine and its window and watermark, the batch baseline, settings,
metrics and the `waitline dispatch` command. It calls through `dispatcher.call` and talks to
Kafka through `dispatcher.kafka`."""
