"""The SQS API, Amazon's queue service: the third adapter, over HTTP.

    http        SqsService: aiohttp on the broker's loop; the JSON and Query protocols,
                signatures, the bounds on connections, bodies and long polls
    query       the Query protocol (form fields in, XML out) to and from the JSON shape
    sigv4       AWS Signature Version 4, checked when access keys are configured
    api         SqsApi: every action, on the JSON protocol's shapes
    model       queues on topics: names, attributes, tags, dead letters, trimming
    messages    an SQS message as a record and back; SQS's checks and MD5 digests
    moves       dead-letter queue redrive (message move tasks)
    errors      SQS's errors (JSON type, legacy code, status) and SqsError

Everything but `http` and the waits of `api` and `moves` is sans-I/O. See docs/sqs.md for
the mapping onto the log and what differs from Amazon's service.
"""
