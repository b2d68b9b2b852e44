"""The broker: topic registry, API handlers and the settings they run with."""
