"""Byte units, defined once for every layer that prints or budgets memory."""

KIB = 1024
MIB = 1024**2
GIB = 1024**3
