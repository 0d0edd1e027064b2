"""The pure-Python scheduler: request phases, slots, the piecewise read; imports no torch."""
