"""Tokens onto the bus: the publisher, acknowledged delivery, synthetic streams."""
