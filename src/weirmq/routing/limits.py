"""Every bound of the routing core, in one place (each exceeded one is a clear error).

Names and binding keys are AMQP 0-9-1 short strings (at most 255 bytes of UTF-8), so an
AMQP client can declare and bind anything a Kafka or HTTP client can, and back. The other
bounds keep one definition or one record from costing the broker without limit: matching
a topic key is linear in its words, an expression's evaluation in its size and depth, and
the route cache holds at most `ROUTE_CACHE_ENTRIES` short keys per router.
"""

from __future__ import annotations

from typing import Final

NAME_MAX_BYTES: Final = 255
"""An exchange's or a destination's name (AMQP shortstr)."""
BINDING_KEY_MAX_BYTES: Final = 255
"""A binding's key: a direct key or a topic pattern (AMQP shortstr)."""
ROUTING_KEY_MAX_BYTES: Final = 4_096
"""A record's routing key. AMQP's are at most 255 bytes; a Kafka key may be longer, and is
refused past this bound rather than walked word by word through the topic tries."""
EXCHANGES_MAX: Final = 10_000
"""Exchanges declared on one router."""
BINDINGS_PER_EXCHANGE_MAX: Final = 100_000
"""Bindings whose source is one exchange."""
BINDING_ARGUMENTS_MAX: Final = 64
"""Arguments of one binding (headers conditions, `x-match` included)."""
ARGUMENT_VALUE_MAX_CHARS: Final = 4_096
"""A string argument's length."""
EXPRESSION_MAX_CHARS: Final = 4_096
"""A content binding's expression text."""
EXPRESSION_DEPTH_MAX: Final = 64
"""Parentheses and NOTs nested in one expression; bounds the parser's and the evaluator's
recursion as well as the reader's patience."""
ROUTE_CACHE_ENTRIES: Final = 10_000
"""Routes remembered per router (least recently used evicted first)."""
ROUTE_CACHE_KEY_MAX_CHARS: Final = 255
"""Longer routing keys are routed but not cached, so the cache's memory stays small."""
