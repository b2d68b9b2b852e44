"""The ``weirmq`` command line.

The command is the one place allowed to import every layer: it wires storage, broker and
server together. Today only ``weirmq serve`` exists, and it says plainly that the Kafka
server is not implemented yet.
"""
