"""Consumer groups: the coordinator's state machines, committed offsets and their log.

Sans-I/O like the rest of the core: time comes in as milliseconds from the caller, and
nothing here touches sockets, threads or the event loop. `broker/groups.py` drives it.
"""
