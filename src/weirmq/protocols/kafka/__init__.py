"""The Kafka wire protocol as an adapter over `weirmq.broker`.

`wire/` frames and codecs (sans I/O), `apis/` one module per group of API keys, and
`dispatch` the table from API key to versions, handler and encoder.
"""
