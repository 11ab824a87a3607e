"""The test session's Apache Kafka broker (lockstep.kafka.apache) and the pom of its jars."""
