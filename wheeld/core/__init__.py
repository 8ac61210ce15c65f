"""The pure core: events, the layout, the rules, the game engine, statistics, signing.

Bytes, events and the time go in, decisions come out: nothing here opens a port,
a file or a socket, or reads a clock (an import-linter contract keeps it so).
"""
