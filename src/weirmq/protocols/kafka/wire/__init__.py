"""Kafka framing and message codecs, sans I/O: bytes in, typed values out, and back."""
