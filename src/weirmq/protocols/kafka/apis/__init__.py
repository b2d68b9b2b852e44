"""The Kafka API handlers: a request in Kafka's shape in, calls on the broker, a response
out."""
