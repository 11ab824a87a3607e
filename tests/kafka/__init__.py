"""The test session's Apache Kafka broker (lockstep.chaos.apache) and the pom of its jars."""
