"""AMQP 0-9-1, RabbitMQ's protocol: the second adapter of the connection pump.

The connection, and the broker behind its methods:

    framing      bytes to frames (AmqpFramer) and frames to pamqp objects (decode, encode)
    connection   AmqpConnection: handshake, tuning, heartbeats, close, flow; a state table
    channel      Channel: open, close, content assembly; a state table
    methods      MethodTable: where exchange, queue, basic, confirm and tx handlers plug in
    auth         PLAIN and AMQPLAIN against a users table
    config       AmqpConfig: the named limits, users, vhosts and capabilities
    errors       reply codes and AmqpError
    session      AmqpAdapter and AmqpSession: the contract the connection pump drives
    model        exchanges and queues on topics: declarations, bindings, publishing
    handlers     the exchange, queue, basic and confirm methods; deliveries, confirms
    deadletter   dead-letter exchanges and x-death
    mapping      an AMQP message as a record, and a record as a delivery
    serve        the adapter as `weirmq serve` builds it from the settings

Everything but `session` and `handlers` (its delivery and confirm tasks) is sans-I/O:
frames and the time in, frames and deadlines out. The codec is pamqp's; see docs/amqp.md
for the state tables and reply codes.
"""

from .config import AmqpConfig
from .connection import AmqpConnection, State, Step
from .errors import AmqpError, ReplyCode
from .framing import AmqpFramer
from .methods import Call, ConnectionInfo, Content, MethodTable
from .session import AmqpAdapter, AmqpSession

__all__ = [
    "AmqpAdapter",
    "AmqpConfig",
    "AmqpConnection",
    "AmqpError",
    "AmqpFramer",
    "AmqpSession",
    "Call",
    "ConnectionInfo",
    "Content",
    "MethodTable",
    "ReplyCode",
    "State",
    "Step",
]
