"""The pure core: wheel events, the layout, the rules, the game engine and its
decisions, the payloads, operator commands, statistics, signing, line noise, rate
limits, the health word and the capture format.

Bytes, events and the time go in, decisions come out: nothing here opens a port,
a file or a socket, or reads a clock (an import-linter contract keeps it so).
"""
