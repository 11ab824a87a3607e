"""Topic catalog, message schemas and the wire codec."""
