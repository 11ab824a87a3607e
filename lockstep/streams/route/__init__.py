"""The ``route`` stage: confidence-gated routing of aligned windows to engine pools."""
