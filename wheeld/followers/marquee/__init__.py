"""The marquee: the winning-number display board, an MQTT consumer apart from the daemon."""
