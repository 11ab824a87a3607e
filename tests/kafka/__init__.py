"""Test-side launcher for a real Apache Kafka broker."""
