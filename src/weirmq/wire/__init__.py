"""The Kafka wire protocol, sans I/O: error codes, record batches, (later) request codecs.

Nothing here touches a socket, a file or a clock; bytes go in and typed values come out.
"""
