"""The asyncio shell around the broker: listener, connections, running and stopping."""
