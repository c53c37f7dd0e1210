"""The pod: the at-least-once engine and its window and watermark, the batch baseline, Kafka
I/O, settings, metrics and the `waitline dispatch` command. The call it makes is
`dispatcher.call`."""
