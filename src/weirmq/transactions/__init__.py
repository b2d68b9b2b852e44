"""Kafka transactions (KIP-98): the transaction coordinator's state, sans I/O.

`coordinator` holds every transactional id's state and decides each request; `records`
is the format of its log, the internal topic `__transaction_state`. The broker's
`broker/txn_service.py` does the I/O: it logs, writes the markers, waits for fsyncs.
"""
