"""Flow control: whether a request is admitted now, slowed, or refused (back-pressure).

    admission    the seam every protocol adapter calls once per request (admits all today)
    controller   FlowController: one decision from every guarded resource and quota
    watermarks   a resource's dual watermarks with hysteresis, as a throttle ratio
    quotas       client byte and request rates, throttled as Kafka computes it

All sans I/O: levels, sizes and times come in as arguments.
"""
