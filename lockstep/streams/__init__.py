"""Settings, the Faust app factory, the embedded broker and the pure stream operators."""
