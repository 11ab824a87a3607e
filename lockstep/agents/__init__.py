"""The roles (decode a batch, call the stage operator, produce) and the process hosting them."""
