"""Flow control: whether a request is admitted now, slowed, or refused (back-pressure)."""
