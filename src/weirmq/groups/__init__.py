"""Consumer groups: the coordinator's state machines, committed offsets and their log.

Sans-I/O like the rest of the core: time comes in as milliseconds from the caller, and
nothing here touches sockets, threads or the event loop. The broker (its log and timer,
`broker/group_service.py`) and each protocol adapter drive it; what leaves it are typed
views (`views.py`), which the adapters turn into their protocol's answers.
"""
