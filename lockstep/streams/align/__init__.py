"""The ``align`` stage: event-time alignment of a stream's media tokens into windows."""
