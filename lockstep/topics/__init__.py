"""Wire contracts: the topic catalog, message schemas, codec, keys, validation, vectors."""
