"""The storage format every protocol writes: Kafka's record batch v2, and its compression.

Records are stored as the producer (of any protocol) framed them, so a Kafka fetch can
send stored bytes as they are. Nothing here touches a socket, a file or a clock.
"""
