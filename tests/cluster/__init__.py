"""wheeld against real clustered brokers (NATS, RabbitMQ, bridged mosquittos), losing the
node it is connected to mid-game. What each engine keeps and loses: docs/brokers.md."""
