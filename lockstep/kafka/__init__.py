"""Everything that talks to a broker or starts one: the only importer of the Kafka clients."""
