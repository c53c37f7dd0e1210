"""Kafka for Waitline: the seam the engine talks through (`seam`), its aiokafka implementation
(`clients`), the client settings (`config`) and the topics a pod writes (`topics`)."""
