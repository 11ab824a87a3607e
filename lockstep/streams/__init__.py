"""The pure stage operators: no I/O, no threads, no clients; time is passed in.

One subpackage per stage that needs several modules (:mod:`.align`, :mod:`.route`), and
the pieces every role shares: which offsets may be committed (:mod:`.offsets`), what a
previous owner already settled (:mod:`.replay`) and second copies (:mod:`.dedupe`).
"""
